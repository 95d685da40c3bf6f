"""The import-layer contract of DESIGN.md, checked over the source with ``ast`` (``just lint``).

Three rules, over every import statement in ``dagnats_trio`` (including those under
``if TYPE_CHECKING:`` and inside functions: a deferred import is still a dependency):

1. Layers. Each top-level part (subpackage or module) of ``dagnats_trio`` sits in one layer of
   :data:`LAYERS`; it may import parts of lower layers only. Parts that share a layer are
   independent: neither imports the other. A part that is in no layer is an error, so a new
   package has to be placed on purpose. The root ``__init__`` (the facade that re-exports the
   public names) is exempt.
2. No package cycles: implied by rule 1 (the graph of allowed edges is acyclic), and checked on
   the real graph as well so that a broken rule reads as the cycle it makes.
3. No private reach: a module does not import a private module (``_name``) of another part. The
   root's own private modules (``_env``, ``_seams``, ``_lazy``, ``_host``) are parts themselves,
   placed in the layers like any other.

Run ``python tools/check_layers.py`` (exit 1 and one line per violation) or import
:func:`violations` (``tests/test_layers.py``).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT_PACKAGE = "dagnats_trio"

#: Highest first. A part may import parts of lower lines only; parts on one line are independent.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli", "testing"),
    ("runtime",),
    ("_host",),
    ("api",),
    ("bridge",),
    ("engine", "worker"),
    ("journal", "inputs"),
    ("dag", "transport", "server", "web"),
    ("protocol", "nats"),
    ("_env", "_seams", "_lazy", "_concurrency", "_defaults"),
)

#: Deliberate exceptions, each ``(importer part, imported part): why``. Keep this empty.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def _module_name(path: Path, source_root: Path) -> tuple[str, bool]:
    rel = path.relative_to(source_root).with_suffix("")
    parts = list(rel.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _imports(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """``(line, imported module or name)`` for every import; relative ones made absolute."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:
                yield node.lineno, f"{target}.{alias.name}"


def _part(module: str) -> str | None:
    """The top-level part of ``dagnats_trio`` that ``module`` is in (None: the root itself)."""
    pieces = module.split(".")
    if pieces[0] != ROOT_PACKAGE or len(pieces) < 2:
        return None
    return pieces[1]


def _private_of_other(importer: str, target: str) -> bool:
    importer_part, target_part = _part(importer), _part(target)
    if importer_part == target_part or target_part is None:
        return False
    inner = target.split(".")[2:]
    # ``from pkg import _name`` also yields ``pkg._name``: a private name or module either way.
    return any(piece.startswith("_") and not piece.startswith("__") for piece in inner)


def violations(source_root: Path, layers: Sequence[Sequence[str]] = LAYERS) -> list[str]:
    """Every breach of the contract in the package under ``source_root``, one line each."""
    rank = {part: level for level, line in enumerate(layers) for part in line}
    out: list[str] = []
    edges: dict[str, set[str]] = {}
    package_dir = source_root / ROOT_PACKAGE
    for path in sorted(package_dir.rglob("*.py")):
        module, is_package = _module_name(path, source_root)
        importer_part = _part(module)
        where = f"{path.relative_to(source_root)}"
        if importer_part is None:
            continue  # the root facade
        if importer_part not in rank:
            out.append(f"{where}: part {importer_part!r} is in no layer of the contract")
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        reported: set[tuple[int, str]] = set()  # (line, rule): one report per statement and rule
        for line, target in _imports(tree, module, is_package):
            target_part = _part(target)
            if target_part is None or target_part == importer_part:
                continue
            if target_part not in rank:
                continue  # ``from dagnats_trio import x`` names; reported at the name's own path
            edges.setdefault(importer_part, set()).add(target_part)
            if (importer_part, target_part) in EXCEPTIONS:
                continue
            if rank[target_part] <= rank[importer_part] and (line, "layer") not in reported:
                reported.add((line, "layer"))
                kind = "a sibling" if rank[target_part] == rank[importer_part] else "a higher layer"
                out.append(f"{where}:{line}: {importer_part} imports {target} ({kind})")
            if _private_of_other(module, target) and (line, "private") not in reported:
                reported.add((line, "private"))
                out.append(f"{where}:{line}: {module} imports private {target}")
    out.extend(f"package cycle: {' -> '.join(cycle)}" for cycle in _cycles(edges))
    return sorted(set(out))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected group of parts (Tarjan), printed as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return [[*group, group[0]] for group in groups]


def main(argv: Sequence[str]) -> int:
    source_root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    found = violations(source_root)
    for line in found:
        print(line)
    print(f"layers: {len(found)} violation(s)", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
