"""``just guards`` (``tools/guards.py``) stays able to run: each guard's mutation still lands on
exactly one place of the package and each test it names still exists; and its mechanics (find,
apply, restore) work on a planted tree, refusing text found twice or nowhere."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("guards_tool", REPO / "tools" / "guards.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["guards_tool"] = module
    spec.loader.exec_module(module)
    return module


guards = _load()


def test_every_guard_applies_once_and_names_existing_tests() -> None:
    assert guards.check(REPO, guards.GUARDS) == []
    assert len(guards.GUARDS) >= 24
    names = [g.name for g in guards.GUARDS]
    assert len(set(names)) == len(names)
    assert all(g.tests and g.edits for g in guards.GUARDS)


def _tree(tmp_path: Path, source: str) -> Path:
    pkg = tmp_path / guards.PACKAGE / "sub"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text(source, encoding="utf-8")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mod.py").write_text("def test_it():\n    pass\n")
    return tmp_path


def test_a_mutation_lands_across_a_line_break_and_is_restored(tmp_path: Path) -> None:
    source = (
        "def f(a, b):\n"
        "    if a > b:\n"
        "        return (\n"
        "            'stale'\n"
        "        )\n"
        "    return 'ok'\n"
    )
    tree = _tree(tmp_path, source)
    guard = guards.Guard(
        "planted",
        "deleted the stale rule",
        (guards.Edit("if a > b: return ( 'stale'", "if False: return ( 'stale'"),),
        ("tests/test_mod.py::test_it",),
    )
    placed, err = guards.plan(tree, guard)
    assert err == ""
    [(hit, _)] = placed
    assert (hit.path.as_posix(), hit.line) == ("dagnats_trio/sub/mod.py", 2)
    originals = guards.apply(tree, placed)
    mutated = (tree / hit.path).read_text(encoding="utf-8")
    assert "    if False: return ( 'stale'\n        )\n" in mutated
    ns: dict[str, object] = {}
    exec(compile(mutated, "mod.py", "exec"), ns)  # the mutated module still compiles and runs
    assert ns["f"](2, 1) == "ok"  # type: ignore[operator]
    guards.restore(originals)
    assert (tree / hit.path).read_text(encoding="utf-8") == source
    assert guards.check(tree, [guard]) == []


def test_text_found_twice_or_nowhere_is_stale(tmp_path: Path) -> None:
    tree = _tree(tmp_path, "x = 1\nx = 1\n")
    twice = guards.Guard("twice", "", (guards.Edit("x = 1", "x = 2"),), ("tests/test_mod.py",))
    nowhere = guards.Guard(
        "nowhere", "", (guards.Edit("y = 1", "y = 2"),), ("tests/test_mod.py::test_gone",)
    )
    placed, err = guards.plan(tree, twice)
    assert placed == [] and "found 2 times" in err and "mod.py:1" in err and "mod.py:2" in err
    placed, err = guards.plan(tree, nowhere)
    assert placed == [] and "found 0 times (nowhere)" in err
    problems = guards.check(tree, [twice, nowhere])
    assert len(problems) == 3
    assert "nowhere: no test tests/test_mod.py::test_gone" in problems
