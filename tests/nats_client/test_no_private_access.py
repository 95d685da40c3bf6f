"""dagnats_trio/nats touches no underscore name of another package (nats, asyncio, trio, ...).

An ``x._name`` is allowed only when ``_name`` is defined inside the package itself (a method,
an attribute assigned on ``self``, a slot); and no name imported from another package may be
followed by an underscore attribute (``trio._core``) or imported under an underscore name.
"""

from __future__ import annotations

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "dagnats_trio" / "nats"
TRIO_TRANSPORT = PACKAGE.parent / "transport" / "_trio_nats.py"
#: The JetStream operations both NATS transports share (the trio transport's base class).
SHARED_JETSTREAM = PACKAGE.parent / "transport" / "_jetstream.py"
#: Packages whose private names are off limits (and everything else outside ours).
WATCHED = ("trio", "asyncio", "nats", "trio_asyncio", "ssl", "socket")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def own_private_names(files: list[pathlib.Path]) -> set[str]:
    names: set[str] = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names.add(node.value)  # __slots__ entries
    return {name for name in names if _is_private(name)}


def violations(directory: pathlib.Path, *extra: pathlib.Path) -> list[str]:
    """Private access in ``directory``'s modules (and ``extra`` files, which may use the
    package's own names)."""
    package_files = sorted(directory.glob("*.py"))
    files = [*package_files, *extra]
    own = own_private_names(files)
    found: list[str] = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if any(_is_private(part) for part in alias.name.split(".")):
                        found.append(f"{path.name}:{node.lineno}: import {alias.name}")
                    imported.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                module = node.module or ""
                if any(_is_private(part) for part in module.split(".")):
                    found.append(f"{path.name}:{node.lineno}: from {module} import ...")
                for alias in node.names:
                    if _is_private(alias.name):
                        found.append(f"{path.name}:{node.lineno}: imports {alias.name}")
                    imported.add(alias.asname or alias.name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported:
                found.append(f"{path.name}:{node.lineno}: {root.id}...{node.attr}")
            elif node.attr not in own:
                found.append(f"{path.name}:{node.lineno}: .{node.attr} is not ours")
    return found


def test_the_nats_client_touches_no_private_name_of_another_package() -> None:
    assert list(PACKAGE.glob("*.py")), PACKAGE
    assert violations(PACKAGE) == []


def test_the_trio_nats_transport_touches_none_either() -> None:
    assert TRIO_TRANSPORT.is_file()
    assert SHARED_JETSTREAM.is_file()
    assert violations(PACKAGE, TRIO_TRANSPORT, SHARED_JETSTREAM) == []


def test_the_scanner_sees_private_access(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bad.py").write_text(
        "import trio\n"
        "from trio._core import _run\n"
        "import nats\n"
        "def f(nc, ch):\n"
        "    trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING = True\n"
        "    nc._transport.write(b'')\n"
        "    return ch._state\n",
        encoding="utf-8",
    )
    found = violations(tmp_path)
    assert any("from trio._core" in line for line in found)
    assert any("trio..." in line for line in found)
    assert any("._transport is not ours" in line for line in found)
    assert any("._state is not ours" in line for line in found)
