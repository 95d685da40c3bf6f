"""A retry honours only real unsafe starts, never an earlier retry's honoured copy of one.

Found by deleting guards (docs/verification.md): if ``_origins`` counted every unsafe intent of
earlier attempts as a start, including the intent a retry writes when it honours an earlier start,
no other test failed. Yet a third attempt would then see two starts of a charge that ran once, and
record a second charge it asks for as interrupted, without ever running it. The existing
properties bound starts from above only (at most once); these tests pin them from both sides.
"""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.journal import Replay, ToolCall, check, open_journal, read_journal
from dagnats_trio.journal._replay import (
    Entry,
    PlanKind,
    TaskIdentity,
    ToolAction,
    canonical_json,
    decide_tool,
    plan_claim,
)
from dagnats_trio.protocol import (
    ClaimRecord,
    DispatchId,
    JournalRecord,
    TaskMessage,
    ToolIntentRecord,
    ToolResultRecord,
)
from dagnats_trio.transport import NatsTransport, Transport

STEP = "agent"
CHARGE = ToolCall("charge", {"card": 1})


def _task(run_id: str, attempt: int) -> TaskMessage:
    return TaskMessage(
        run_id=run_id,
        step_id=STEP,
        task="agent",
        workflow="wf",
        dispatch=DispatchId(0, attempt, f"n{attempt}"),
        is_loop=True,
    )


def _charger(starts: list[str]) -> Any:
    async def charge(call: ToolCall) -> Any:
        starts.append(call.key)
        return f"charged-{len(starts)}"

    return charge


async def _third_attempt_runs_the_charge_nobody_started(transport: Transport, run: str) -> None:
    starts: list[str] = []
    charge = _charger(starts)
    # Attempt 1 charges once, then times out (its handle is simply dropped).
    j1 = await open_journal(transport, _task(run, 1))
    first = await j1.tool(CHARGE, Replay.UNSAFE, charge)
    assert first.output == "charged-1"
    # Attempt 2 asks for the same charge: honoured (its intent and result are copies), no start.
    j2 = await open_journal(transport, _task(run, 2))
    honoured = await j2.tool(CHARGE, Replay.UNSAFE, charge)
    assert honoured.output == "charged-1" and not honoured.interrupted
    assert starts == [f"{run}.{STEP}.0.0"]
    # Attempt 3 asks for the charge twice: the first is the one start there was ...
    j3 = await open_journal(transport, _task(run, 3))
    again = await j3.tool(CHARGE, Replay.UNSAFE, charge)
    assert again.output == "charged-1"
    assert len(starts) == 1
    # ... and the second was never started by anyone, so it runs (it is not "interrupted").
    second = await j3.tool(CHARGE, Replay.UNSAFE, charge)
    assert starts == [f"{run}.{STEP}.0.0", f"{run}.{STEP}.0.1"]
    assert second.output == "charged-2"
    assert not second.interrupted and second.error is None
    records = await read_journal(transport, run, STEP)
    assert check(records).ok
    results = [r for _, r in records if isinstance(r, ToolResultRecord) and r.attempt == 3]
    assert [r.output for r in results] == ["charged-1", "charged-2"]


async def test_third_attempt_runs_the_charge_nobody_started_nats(
    nats_transport: NatsTransport,
) -> None:
    await _third_attempt_runs_the_charge_nobody_started(nats_transport, f"g{_uid()}")


async def test_third_attempt_runs_the_charge_nobody_started_sim(
    sim_transport: Transport, autojump_clock: trio.testing.MockClock
) -> None:
    await _third_attempt_runs_the_charge_nobody_started(sim_transport, f"g{_uid()}")


def _uid() -> str:
    return uuid.uuid4().hex[:12]


# --- the property: over any chain of attempts, each unsafe call runs exactly as often as the ---
# --- attempt that asks for it most; safe calls run fresh in every attempt ----------------------

#: The declaration is a property of the tool, as in a real handler.
REPLAY_OF = {"search": Replay.SAFE, "charge": Replay.UNSAFE, "send": Replay.UNSAFE}
calls = st.tuples(st.sampled_from(sorted(REPLAY_OF)), st.integers(0, 1))
attempts = st.lists(st.lists(calls, max_size=4), min_size=1, max_size=4)


@attrs.define
class _Log:
    entries: list[Entry] = attrs.field(factory=list)

    def add(self, rec: JournalRecord) -> None:
        self.entries.append((len(self.entries) + 1, rec))


def _run_attempts(scripts: list[list[tuple[str, int]]]) -> tuple[dict[tuple[str, int], int], _Log]:
    """Mirror the handle's writes over the pure rules; every attempt ends without a commit."""
    log = _Log()
    starts: dict[tuple[str, int], int] = {}
    for attempt, script in enumerate(scripts, start=1):
        t = TaskIdentity("r1", STEP, 0, attempt, f"n{attempt}", None)
        plan = plan_claim(log.entries, t, 1000, full=True)
        assert plan.kind is PlanKind.PROCEED and plan.view is not None
        cid = f"c{attempt}"
        log.add(ClaimRecord(0, attempt, cid, t.nonce))
        consumed: frozenset[int] = frozenset()
        for pos, (name, inp) in enumerate(script):
            rp = REPLAY_OF[name]
            d, consumed = decide_tool(plan.view, consumed, pos, name, canonical_json(inp), rp)
            assert d.action in (ToolAction.RUN, ToolAction.RECORD), d
            intent = ToolIntentRecord(0, attempt, cid, pos, name, inp, rp, f"r1.{STEP}.0.{pos}")
            if d.action is ToolAction.RUN:
                log.add(intent)
                starts[(name, inp)] = starts.get((name, inp), 0) + 1
                log.add(ToolResultRecord(0, attempt, cid, pos, output=f"{name}-{pos}"))
                continue
            assert d.result is not None and d.write_intent
            log.add(intent)
            r = d.result
            log.add(
                ToolResultRecord(
                    0,
                    attempt,
                    cid,
                    pos,
                    output=r.output,
                    error=r.error,
                    interrupted=r.interrupted,
                    partial=list(r.partial),
                )
            )
    return starts, log


@settings(max_examples=300, deadline=None)
@given(scripts=attempts)
def test_each_unsafe_call_starts_as_often_as_one_attempt_asks_for_it(
    scripts: list[list[tuple[str, int]]],
) -> None:
    starts, log = _run_attempts(scripts)
    identities = {c for script in scripts for c in script}
    for ident in identities:
        asked = [script.count(ident) for script in scripts]
        want = sum(asked) if REPLAY_OF[ident[0]] is Replay.SAFE else max(asked)
        assert starts.get(ident, 0) == want, (ident, asked, starts)
    assert check(log.entries).ok
