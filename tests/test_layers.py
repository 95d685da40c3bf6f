"""The import-layer contract (``tools/check_layers.py``, run by ``just lint``): the package keeps
it, and the checker sees each kind of breach when one is planted in a small package."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parent.parent


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_layers", REPO / "tools" / "check_layers.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_layers"] = module
    spec.loader.exec_module(module)
    return module


check_layers = _checker()


def test_the_package_keeps_the_layer_contract() -> None:
    found = check_layers.violations(REPO)
    print(f"layer contract: {len(found)} violation(s)")
    assert found == []


def test_every_part_of_the_package_is_placed() -> None:
    placed = {part for line in check_layers.LAYERS for part in line}
    parts = {
        p.stem if p.is_file() else p.name
        for p in (REPO / "dagnats_trio").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.stem != "__init__")
    }
    assert parts <= placed, f"not in LAYERS: {sorted(parts - placed)}"
    assert check_layers.EXCEPTIONS == {}


def _package(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "dagnats_trio" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


LAYERS = (("api",), ("bridge",), ("engine", "worker"), ("protocol",))


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"protocol/__init__.py": "from ..engine import advance\n"},
            [
                "dagnats_trio/protocol/__init__.py:1: protocol imports dagnats_trio.engine",
                "package cycle: engine -> protocol -> engine",
            ],
            id="upward",
        ),
        pytest.param(
            {"engine/core.py": "import dagnats_trio.worker\n"},
            ["dagnats_trio/engine/core.py:1: engine imports dagnats_trio.worker (a sibling)"],
            id="sibling",
        ),
        pytest.param(
            {"api/rest.py": "from ..bridge._http import routes\n"},
            ["dagnats_trio/api/rest.py:1: dagnats_trio.api.rest imports private"],
            id="private",
        ),
        pytest.param(
            {"bridge/_http.py": "def f():\n    from dagnats_trio.api import _rest_body\n"},
            [
                "dagnats_trio/bridge/_http.py:2: bridge imports dagnats_trio.api (a higher layer)",
                "dagnats_trio/bridge/_http.py:2: dagnats_trio.bridge._http imports private",
                "package cycle: api -> bridge -> api",
            ],
            id="deferred-upward-private-and-cycle",
        ),
        pytest.param(
            {"newpart/__init__.py": "\n"},
            ["dagnats_trio/newpart/__init__.py: part 'newpart' is in no layer"],
            id="unplaced",
        ),
    ],
)
def test_the_checker_sees_a_planted_breach(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    base = {
        "__init__.py": "from .api import Service\n",
        "api/__init__.py": "from ..bridge import Bridge\n",
        "api/rest.py": "from ..bridge import Bridge\n",
        "bridge/__init__.py": "from ..engine import Engine\n",
        "bridge/_http.py": "\n",
        "engine/__init__.py": "from ..protocol import converter\n",
        "engine/core.py": "from ..protocol import converter\n",
        "worker/__init__.py": "from dagnats_trio.protocol import converter\n",
        "protocol/__init__.py": "\n",
    }
    clean = check_layers.violations(_package(tmp_path / "clean", base), LAYERS)
    assert clean == []
    found = check_layers.violations(_package(tmp_path / "bad", {**base, **files}), LAYERS)
    assert len(found) == len(expected), found
    for line, prefix in zip(found, sorted(expected), strict=True):
        assert line.startswith(prefix), (line, prefix)


def test_only_the_engine_builds_and_encodes_run_snapshots() -> None:
    """The API creates a run's first snapshot through the engine's ``write_first_snapshot``; no
    module outside ``dagnats_trio/engine`` builds or encodes a snapshot itself."""
    owners = {"new_run_snapshot", "encode_snapshot", "create_snapshot"}
    found = []
    for path in sorted((REPO / "dagnats_trio").rglob("*.py")):
        if path.parent.name == "engine":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
            if isinstance(node, ast.Name | ast.Attribute) and name in owners:
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert found == []


def test_concrete_public_classes_are_final() -> None:
    """Every class a package exports is ``@final`` unless something in the package derives from
    it (a base such as ``TransportError``), or it is an enum or a ``Protocol``."""
    import enum
    import inspect
    import pkgutil

    import dagnats_trio

    packages = ["dagnats_trio"] + [
        f"dagnats_trio.{m.name}" for m in pkgutil.iter_modules(dagnats_trio.__path__) if m.ispkg
    ]
    exported: dict[type, str] = {}
    for name in packages:
        package = importlib.import_module(name)
        for attr in package.__all__:
            obj = getattr(package, attr)
            if inspect.isclass(obj) and obj.__module__.startswith("dagnats_trio"):
                exported[obj] = f"{name}.{attr}"
    defined = {
        cls
        for module in list(sys.modules.values())
        if getattr(module, "__name__", "").startswith("dagnats_trio")
        for _, cls in inspect.getmembers(module, inspect.isclass)
        if cls.__module__.startswith("dagnats_trio")
    }
    bases = {base for cls in defined for base in cls.__mro__[1:]}
    not_final = sorted(
        where
        for cls, where in exported.items()
        if not getattr(cls, "__final__", False)
        and cls not in bases
        and not issubclass(cls, enum.Enum)
        and not getattr(cls, "_is_protocol", False)
    )
    print(f"{len(exported)} exported classes checked")
    assert not_final == []


def test_docs_architecture_lists_the_layers_of_the_contract() -> None:
    """docs/architecture.md's layer table is the contract's ``LAYERS``, line for line."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| ")]
    table = [
        tuple(part.strip(" `") for part in cells[2].split(","))
        for cells in rows
        if cells[1].strip().isdigit()
    ]
    assert tuple(table) == check_layers.LAYERS
