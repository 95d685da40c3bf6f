"""The pure cores are pure at import time, and the lazy package ``__init__`` modules are honest.

Each pure module is imported in a fresh interpreter (``sys.modules`` of this one is full of Trio
already); the test fails if any I/O package was loaded on the way, through a package
``__init__`` or otherwise. A positive control shows the probe sees an I/O import when there is one.

One fresh interpreter serves every module: it forks a child per module, so each import starts
from that interpreter's own ``sys.modules`` and no import of one module is seen by another. That
interpreter has loaded only what Python loads at start, ``json``, and the third-party libraries
the pure cores are built on (``PREWARMED``, imported once instead of once per module); it checks
that none of them loaded an I/O package, so a pure module that imports one of them is judged as
if it had loaded it itself.
"""

from __future__ import annotations

import ast
import functools
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import dagnats_trio

#: Packages no pure module may load (the card: no Trio, asyncio or NATS; nor the HTTP stack).
IO_PACKAGES = (
    "trio",
    "trio_asyncio",
    "asyncio",
    "nats",
    "starlette",
    "hypercorn",
    "anyio",
    "httpx",
    "sniffio",
)

#: A fresh interpreter on a loaded machine: generous.
IMPORT_TIMEOUT_S = 60.0

PACKAGE_DIR = Path(dagnats_trio.__file__).parent


def _submodules(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [package] + [
        f"{package}.{info.name}" for info in pkgutil.iter_modules(pkg.__path__) if not info.ispkg
    ]


PURE_MODULES = sorted(
    {
        "dagnats_trio",
        *_submodules("dagnats_trio.protocol"),
        *_submodules("dagnats_trio.dag"),
        # the wire client's sans-IO protocol core (not its Trio connection)
        "dagnats_trio.nats",
        "dagnats_trio.nats._backoff",
        "dagnats_trio.nats._defaults",
        "dagnats_trio.nats._encoder",
        "dagnats_trio.nats._errors",
        "dagnats_trio.nats._events",
        "dagnats_trio.nats._headers",
        "dagnats_trio.nats._limits",
        "dagnats_trio.nats._parser",
        "dagnats_trio.nats._protocol",
        "dagnats_trio.nats._servers",
        "dagnats_trio.engine",
        "dagnats_trio.engine.core",
        "dagnats_trio.engine._advance_terms",
        "dagnats_trio.engine._decision",
        "dagnats_trio.engine._decision_events",
        "dagnats_trio.engine.effects",
        "dagnats_trio.engine.hooks",
        "dagnats_trio.engine.snapshot",
        "dagnats_trio.engine._start_sweep_rules",
        "dagnats_trio.journal",
        "dagnats_trio.journal._replay",
        "dagnats_trio.journal._replay_calls",
        "dagnats_trio.journal._replay_claim",
        "dagnats_trio.journal._replay_commits",
        "dagnats_trio.journal._replay_task",
        "dagnats_trio.journal._errors",
        "dagnats_trio.journal.check",
        "dagnats_trio.journal._check_groups",
        "dagnats_trio.journal._check_report",
        "dagnats_trio.inputs",
        "dagnats_trio.inputs.submission",
        "dagnats_trio.inputs._settlement",
        "dagnats_trio.inputs._snapshot",
        "dagnats_trio.inputs._index",
        "dagnats_trio.inputs.errors",
    }
)

#: Libraries the pure cores import, loaded by the probe before it forks (module docstring).
PREWARMED = ("attrs", "cattrs", "cattrs.gen", "cattrs.strategies", "typing")

_PROBE = """
import json, os, sys
for library in {prewarmed!r}:
    __import__(library)
early = sorted(p for p in {io!r} if p in sys.modules)
assert not early, f"the probe's own imports loaded I/O packages: {{early}}"
loaded = {{}}
for module in {modules!r}:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            __import__(module)
            said = sorted(p for p in {io!r} if p in sys.modules)
        except BaseException as exc:
            said = f"importing {{module}} failed: {{exc!r}}"
        os.write(write, json.dumps(said).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        loaded[module] = json.loads(answer.read())
    os.waitpid(pid, 0)
print(json.dumps(loaded))
"""


@functools.cache
def _io_loaded_by_each(modules: tuple[str, ...]) -> dict[str, list[str]]:
    """The I/O packages in ``sys.modules`` after importing each module, each in a child forked
    from one fresh interpreter (module docstring)."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE.format(modules=modules, io=IO_PACKAGES, prewarmed=PREWARMED),
        ],
        capture_output=True,
        text=True,
        timeout=IMPORT_TIMEOUT_S,
        check=True,
    )
    loaded: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(loaded) == sorted(modules), loaded
    for said in loaded.values():
        assert isinstance(said, list), said  # the import itself failed
    return loaded


def _io_loaded_by(module: str) -> list[str]:
    return _io_loaded_by_each((module,))[module]


@pytest.mark.parametrize("module", PURE_MODULES)
def test_a_pure_module_loads_no_io_package(module: str) -> None:
    loaded = _io_loaded_by_each(tuple(PURE_MODULES))[module]
    assert loaded == [], f"importing {module} loads I/O packages"


def test_the_probe_sees_io_imports() -> None:
    """Positive control: the I/O shells do load Trio and NATS, and the probe says so."""
    assert {"trio", "nats", "trio_asyncio"} <= set(_io_loaded_by("dagnats_trio.transport._nats"))
    # The package itself loads nats-py only when NatsTransport is asked for (lazy re-export).
    assert "nats" not in _io_loaded_by("dagnats_trio.transport")
    assert "trio" in _io_loaded_by("dagnats_trio.engine._shell")


# -- the lazy re-exports ----------------------------------------------------------------------


def _lazy_init(package: str) -> tuple[dict[str, set[str]], dict[str, set[str]], list[str]]:
    """From a package ``__init__``'s source: the ``if TYPE_CHECKING:`` imports, the table given to
    ``lazy_exports`` in its ``else:`` branch, and ``__all__``."""
    path = PACKAGE_DIR.joinpath(*package.split(".")[1:], "__init__.py")
    tree = ast.parse(path.read_text())
    checked: dict[str, set[str]] = {}
    table: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom)
                module = "." * imp.level + (imp.module or "")
                checked[module] = {alias.name for alias in imp.names}
            call = node.orelse[-1]
            assert isinstance(call, ast.Assign) and isinstance(call.value, ast.Call)
            literal = ast.literal_eval(call.value.args[1])
            table = {module: set(names) for module, names in literal.items()}
    exported = importlib.import_module(package).__all__
    return checked, table, list(exported)


LAZY_PACKAGES = (
    "dagnats_trio",
    "dagnats_trio.nats",
    "dagnats_trio.engine",
    "dagnats_trio.journal",
    "dagnats_trio.inputs",
    "dagnats_trio.cli",
)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_table_type_checking_imports_and_all_agree(package: str) -> None:
    checked, table, exported = _lazy_init(package)
    assert table, f"{package} has no lazy table"
    assert checked == table
    lazy_names = set().union(*table.values())
    assert lazy_names <= set(exported)
    pkg = importlib.import_module(package)
    assert set(exported) <= set(dir(pkg))
    for name in exported:
        assert getattr(pkg, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = pkg.no_such_name
