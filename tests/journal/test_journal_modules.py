"""The journal package's shape (issue 11 item 5): one fenced writer, small modules.

Fencing is the most dangerous code of the runtime; a second copy of it could drift from the
first. Every fenced append (a publish with an expected last subject sequence) made by the
journal's writers (the journal itself, the worker, the bridge) is made in
``journal/_fencing.py``, and the handle no longer holds the claim protocol, the reads or the
tool runner beside its calls. (Other parts may fence writes of their own, such as the engine's
run index; those are not journal records.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import dagnats_trio

PACKAGE = Path(dagnats_trio.__file__).parent
#: The parts that write journal records: the journal, and the two that settle through it.
JOURNAL_WRITERS = ("journal", "worker", "bridge")
#: Lines a journal module may have (the replay rules too: split into ``_replay_*`` modules).
MAX_JOURNAL_MODULE_LINES = 400


def _fenced_publishers() -> list[str]:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] not in JOURNAL_WRITERS:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and any(
                kw.arg == "expected_last_subject_seq" for kw in node.keywords
            ):
                found.append(f"{rel.as_posix()}:{node.lineno}")
    return found


def test_one_fenced_writer() -> None:
    found = _fenced_publishers()
    assert found, "no fenced append found at all: the scan is broken"
    assert {f.split(":")[0] for f in found} == {"journal/_fencing.py"}, found


def test_journal_modules_are_small() -> None:
    sizes = {
        p.name: len(p.read_text(encoding="utf-8").splitlines())
        for p in (PACKAGE / "journal").glob("*.py")
    }
    assert "_handle.py" in sizes and "_fencing.py" in sizes
    too_big = {name: n for name, n in sizes.items() if n > MAX_JOURNAL_MODULE_LINES}
    assert not too_big, too_big
