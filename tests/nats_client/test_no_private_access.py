"""No module of dagnats_trio, nor of the repository's other Python (tests, chaos, bench, tools,
examples), touches an underscore name of another package (nats, asyncio, trio, trio-asyncio, ...)
(issue 10 item 5).

An ``x._name`` is allowed only when ``_name`` is defined inside our own code (a method, an
attribute assigned on ``self``, a slot): for dagnats_trio/nats anywhere in that package, for the
whole of dagnats_trio in the module itself or in a module of ours it imports. No name imported
from a watched package may be followed by an underscore attribute (``trio._core``) or imported
under an underscore name. The internals the nats-py transport once used (``nc._transport``,
``loop._io_task``, ``handle._scope``, ``channel._state``, ...) may be reached on ``self`` only,
even where a class of ours has an attribute of that name.

There is no exception: deterministic scheduling (the chaos soak's, ``crash_test``'s) comes from
Trio's Hypothesis plugin through Hypothesis's public API (``dagnats_trio.testing._scheduling``),
not from Trio's ``_ALLOW_DETERMINISTIC_SCHEDULING`` and ``_r``.
"""

from __future__ import annotations

import ast
import functools
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "dagnats_trio" / "nats"
TRIO_TRANSPORT = PACKAGE.parent / "transport" / "_trio_nats.py"
#: The modules it is split into (messages and deliveries, batches).
TRIO_TRANSPORT_PARTS = sorted((PACKAGE.parent / "transport").glob("_trio_nats_*.py"))
#: The JetStream operations both NATS transports share (the trio transport's base class).
SHARED_JETSTREAM = PACKAGE.parent / "transport" / "_jetstream.py"
SHARED_JETSTREAM_BATCHES = PACKAGE.parent / "transport" / "_jetstream_batch.py"
SHARED_JETSTREAM_AT_ONCE = PACKAGE.parent / "transport" / "_jetstream_at_once.py"
SHARED_JETSTREAM_WIRE = PACKAGE.parent / "transport" / "_jetstream_wire.py"
#: Packages whose private names are off limits (and everything else outside ours).
WATCHED = ("trio", "asyncio", "nats", "trio_asyncio", "ssl", "socket")
#: The whole package.
ROOT = PACKAGE.parent
REPO = ROOT.parent
#: The repository's other Python: each directory is scanned as a package of its own, where the
#: private names of dagnats_trio and of the directory count as ours (a test may reach into our
#: code; never into Trio's, nats-py's, ...).
OTHER_PYTHON = tuple(REPO / name for name in ("tests", "chaos", "bench", "tools", "examples"))
#: Underscore names that are documented public API (``os._exit``: the exit of a forked child).
DOCUMENTED = frozenset({("os", "_exit")})
#: Private names of nats-py, asyncio, trio-asyncio and Trio objects the nats-py transport used
#: to reach (issue 10): on anything but ``self`` they are someone else's.
FOREIGN_INTERNALS = frozenset(
    {
        "_transport", "_ps", "_pending_data_size", "_max_payload", "_inbox_prefix", "_nuid",
        "_process_op_err", "_io_reader", "_io_writer", "_protocol", "_buffer", "_io_task",
        "_q_send", "_scope", "_cancelled", "_run", "_raise", "_state", "_core",
        "_ALLOW_DETERMINISTIC_SCHEDULING", "_r",
    }
)  # fmt: skip


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@functools.cache
def _nodes(source: str) -> tuple[ast.AST, ...]:
    """Every node of one module's text, parsed and walked once: each scan below looks at a
    module's nodes several times (imports, attributes, the names it defines), and a module is
    read by several scans. Cached by the text, which is all the answer depends on."""
    return tuple(ast.walk(ast.parse(source)))


@functools.cache
def _own_private_names_in(source: str) -> frozenset[str]:
    """The private names one module's text defines. Cached by the text (the answer depends on
    nothing else): the scans read each module of the package once per scanned directory and
    once per module importing it, ~2,000 walks of ~470 files, most of the scans' time."""
    names: set[str] = set()
    for node in _nodes(source):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)  # __slots__ entries
    return frozenset(name for name in names if _is_private(name))


def own_private_names(files: list[pathlib.Path]) -> set[str]:
    names: set[str] = set()
    for path in files:
        names |= _own_private_names_in(path.read_text(encoding="utf-8"))
    return names


def violations(directory: pathlib.Path, *extra: pathlib.Path) -> list[str]:
    """Private access in ``directory``'s modules (and ``extra`` files, which may use the
    package's own names)."""
    package_files = sorted(directory.glob("*.py"))
    files = [*package_files, *extra]
    own = own_private_names(files)
    found: list[str] = []
    for path in files:
        nodes = _nodes(path.read_text(encoding="utf-8"))
        imported: set[str] = set()
        for node in nodes:
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
        for node in nodes:
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


def _imported_modules(
    path: pathlib.Path, nodes: tuple[ast.AST, ...], root: pathlib.Path
) -> list[pathlib.Path]:
    """Our own modules ``path`` imports (relative or ``dagnats_trio.``), as files."""
    out: list[pathlib.Path] = []
    for node in nodes:
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = path.parent
            for _ in range(node.level - 1):
                base = base.parent
        elif (node.module or "").split(".")[0] == root.name:
            base = root.parent
        else:
            continue
        parts = (node.module or "").split(".") if node.module else []
        target = base.joinpath(*parts)
        candidates = [target.with_suffix(".py"), target / "__init__.py"]
        candidates += [target / f"{alias.name}.py" for alias in node.names]
        out.extend(c for c in candidates if c.is_file())
    return out


def _reflective(call: ast.Call, own: set[str]) -> list[str]:
    """``getattr(x, "_name")`` and friends on another object, and nats-py's undocumented
    ``subscribe(future=...)`` (a subscription resolved through a duck-typed future)."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "subscribe"
        and any(keyword.arg == "future" for keyword in call.keywords)
    ):
        return ["subscribe(future=...)"]
    if not (isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr")):
        return []
    if len(call.args) < 2 or not isinstance(call.args[1], ast.Constant):
        return []
    name = call.args[1].value
    target = call.args[0]
    if not isinstance(name, str) or not _is_private(name):
        return []
    on_self = isinstance(target, ast.Name) and target.id in ("self", "cls")
    if (name in FOREIGN_INTERNALS and not on_self) or name not in own:
        return [f"{func.id}(..., {name!r})"]
    return []


def package_violations(root: pathlib.Path, ours: frozenset[str] = frozenset()) -> list[str]:
    """Private access of another package's objects anywhere below ``root``; ``ours`` are more
    private names of our own (dagnats_trio's, for the tests that reach into it)."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        nodes = _nodes(path.read_text(encoding="utf-8"))
        own = own_private_names([path, *_imported_modules(path, nodes, root)]) | ours
        where = path.relative_to(root).as_posix()
        imported: set[str] = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    if top in WATCHED and any(_is_private(p) for p in alias.name.split(".")):
                        found.append(f"{where}:{node.lineno}: import {alias.name}")
                    if top in WATCHED:
                        imported.add((alias.asname or alias.name).split(".")[0])
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                module = node.module or ""
                if module.split(".")[0] not in WATCHED:
                    continue
                if any(_is_private(part) for part in module.split(".")):
                    found.append(f"{where}:{node.lineno}: from {module} import ...")
                for alias in node.names:
                    if _is_private(alias.name):
                        found.append(f"{where}:{node.lineno}: imports {alias.name}")
                    imported.add(alias.asname or alias.name)
        for node in nodes:
            if isinstance(node, ast.Call):
                found.extend(f"{where}:{node.lineno}: {line}" for line in _reflective(node, own))
            if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
                continue
            if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in DOCUMENTED:
                continue
            on_self = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            root_name = node.value
            while isinstance(root_name, ast.Attribute):
                root_name = root_name.value
            if isinstance(root_name, ast.Name) and root_name.id in imported:
                found.append(f"{where}:{node.lineno}: {root_name.id}...{node.attr}")
            elif node.attr in FOREIGN_INTERNALS and not on_self:
                found.append(f"{where}:{node.lineno}: .{node.attr} of another package's object")
            elif node.attr not in own:
                found.append(f"{where}:{node.lineno}: .{node.attr} is not ours")
    return found


def test_no_module_of_dagnats_trio_touches_a_private_name_of_another_package() -> None:
    found = package_violations(ROOT)
    print(f"{len(list(ROOT.rglob('*.py')))} modules scanned, {len(found)} violations")
    assert found == []


def test_nor_does_the_rest_of_the_repository() -> None:
    scanned = 0
    found: list[str] = []
    for directory in OTHER_PYTHON:
        assert directory.is_dir(), directory
        files = sorted(directory.rglob("*.py"))
        scanned += len(files)
        ours = frozenset(own_private_names([*ROOT.rglob("*.py"), *files]))
        found += [f"{directory.name}/{line}" for line in package_violations(directory, ours)]
    print(f"{scanned} modules scanned, {len(found)} violations")
    assert found == []


def test_the_package_scanner_sees_trio_scheduler_internals_in_a_test_file(
    tmp_path: pathlib.Path,
) -> None:
    """What the soak once did to seed Trio's scheduler, in a module or in a test, is caught."""
    (tmp_path / "transport").mkdir()
    (tmp_path / "transport" / "test_x.py").write_text(
        "import trio\n"
        "from trio._core import _run\n"
        "def test_seeded() -> None:\n"
        "    trio._core._run._r.seed(7)\n"
        "    trio._core._run._ALLOW_DETERMINISTIC_SCHEDULING = True\n"
        "    run_mod = _run\n"
        "    run_mod._r.seed(7)\n",
        encoding="utf-8",
    )
    found = package_violations(tmp_path)
    assert any(":2: from trio._core import" in line for line in found), found
    assert any(":4: trio..._r" in line for line in found), found
    assert any(":5: trio..._ALLOW_DETERMINISTIC_SCHEDULING" in line for line in found), found
    assert any(":7: ._r of another package's object" in line for line in found), found
    assert all(line.startswith("transport/test_x.py:") for line in found), found


def test_the_package_scanner_sees_foreign_internals_even_under_our_names(
    tmp_path: pathlib.Path,
) -> None:
    (tmp_path / "mod.py").write_text(
        "import asyncio\n"
        "from trio import _core\n"
        "class Delivery:\n"
        "    def __init__(self, transport, channel):\n"
        "        self._transport = transport\n"
        "        self._state = channel\n"
        "    def ok(self):\n"
        "        return self._transport, self._state\n"
        "def bad(nc, ch, loop):\n"
        "    nc._transport.write(b'')\n"
        "    loop._io_task = None\n"
        "    asyncio._get_running_loop()\n"
        "    nc.subscribe('x', future=None)\n"
        "    getattr(getattr(ch, '_state', None), 'data', None)\n"
        "    return ch._state\n",
        encoding="utf-8",
    )
    found = package_violations(tmp_path)
    assert any("imports _core" in line for line in found), found
    assert any(":10: ._transport of another" in line for line in found), found
    assert any(":11: ._io_task of another" in line for line in found), found
    assert any(":12: asyncio..._get_running_loop" in line for line in found), found
    assert any(":13: subscribe(future=...)" in line for line in found), found
    assert any(":14: getattr(..., '_state')" in line for line in found), found
    assert any(":15: ._state of another" in line for line in found), found
    assert not any(":8:" in line for line in found), found


def test_the_nats_client_touches_no_private_name_of_another_package() -> None:
    assert list(PACKAGE.glob("*.py")), PACKAGE
    assert violations(PACKAGE) == []


def test_the_trio_nats_transport_touches_none_either() -> None:
    assert TRIO_TRANSPORT.is_file()
    assert SHARED_JETSTREAM.is_file()
    assert SHARED_JETSTREAM_WIRE.is_file()
    assert len(TRIO_TRANSPORT_PARTS) >= 2, TRIO_TRANSPORT_PARTS
    extra = [
        TRIO_TRANSPORT,
        *TRIO_TRANSPORT_PARTS,
        SHARED_JETSTREAM,
        SHARED_JETSTREAM_AT_ONCE,
        SHARED_JETSTREAM_BATCHES,
        SHARED_JETSTREAM_WIRE,
    ]
    assert violations(PACKAGE, *extra) == []


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
