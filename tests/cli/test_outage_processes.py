"""Every CLI process rides out a 90 s NATS outage mid-run (issue 16, item 1), as separate
processes: ``dagnats worker`` (the native client) runs the agent, ``dagnats serve --client
nats-py`` and ``dagnats dev --nats URL`` (native, no workers) each run an engine and an API on
the same server.

The real server is stopped while the agent's unsafe tool is in flight; the tool completes while
NATS is away; the server stays down for :data:`OUTAGE_S` and is restarted on its store and
port. Then the run finishes with the tool started once, each process said once that NATS was
unreachable and once that it was back, and both APIs' ``/healthz`` said ``down`` during the
outage and ``up`` after it. (Before the fix a worker gave its connection up after ~30 s and
exited rc 1; the in-process twin is tests/e2e/test_nats_outage.py.) The scenario is
tests/cli/_outage_processes.py, run by the ``outages`` fixture beside the in-process ones so
their outages overlap; this test asserts on its outcome.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Final

import pytest
from _outage import OUTAGE_S, Ridden

from dagnats_trio.journal import check
from dagnats_trio.protocol import ToolIntentRecord, ToolResultRecord

from ._outage_processes import ProcessesOutage

UNREACHABLE: Final = "NATS is unreachable"
BACK_AFTER: Final = re.compile(r"NATS is back \(.*?\) after ([0-9.]+) s unreachable")
#: One message about the connection, whole: from its logger's name to its last words.
SAID: Final = re.compile(
    r"\S+: NATS is (?:unreachable \(.*?calls fail meanwhile|back \(.*? s unreachable)"
)


def _said(stderr: Path) -> list[str]:
    """What the process logged about NATS going and coming back, each message whole (rich
    wraps long lines: whitespace is folded before the messages are cut out)."""
    text = " ".join(stderr.read_text(errors="replace").split())
    return SAID.findall(text)


@pytest.mark.slow
@pytest.mark.outage("processes")
def test_worker_serve_and_dev_processes_ride_out_a_90s_outage(
    outages: dict[str, Ridden],
) -> None:
    seen = outages["processes"].unwrap()
    assert isinstance(seen, ProcessesOutage)
    run, records, refused, starts = seen.run, seen.records, seen.refused, seen.tool_starts
    said = {name: _said(path) for name, path in seen.logs.items()}
    print(
        f"outage {seen.outage_s:.1f} s; run {run['status']} {seen.recovered_s:.1f} s after the "
        f"restart; tool starts {starts}; records {[rec.TYPE for _, rec in records]}; "
        f"healthz down {seen.down}, up {seen.up}; GET run during it "
        f"{[r.status_code for r in refused]} {[r.json()['error']['code'] for r in refused]}; "
        f"rc {seen.rcs}"
    )
    for name, lines in said.items():
        print(f"{name} said:")
        for line in lines:
            print(f"  {line}")
    assert all(seen.alive_at_end.values()), seen.alive_at_end
    assert run["status"] == "completed", run
    assert len(starts) == 1 and "delivery 1 " in starts[0], starts
    intents = [rec for _, rec in records if isinstance(rec, ToolIntentRecord)]
    results = [rec for _, rec in records if isinstance(rec, ToolResultRecord)]
    assert intents and {i.name for i in intents} == {"charge"}
    assert len([res for res in results if not res.interrupted]) <= 1
    assert len(results) == len(intents)
    assert check(records, engine_iterations=1).ok
    assert seen.down == [{"status": "unavailable", "nats": "down"}] * 2
    # Meanwhile a NATS-backed route answers 503 ``unavailable``: the API serves, and says why.
    assert [(r.status_code, r.json()["error"]["code"]) for r in refused] == [
        (503, "unavailable")
    ] * 2
    assert seen.up == [{"status": "ok", "nats": "up"}] * 2
    for name, lines in said.items():
        unreachable = [line for line in lines if UNREACHABLE in line]
        back = [m for line in lines if (m := BACK_AFTER.search(line))]
        assert len(unreachable) == 1 and len(back) == 1, (name, lines)
        assert float(back[0].group(1)) >= OUTAGE_S - 1, (name, lines)
    assert seen.rcs == {"worker": 0, "serve": 0, "dev": 0}
