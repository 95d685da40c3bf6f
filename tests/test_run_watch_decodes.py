"""Issue 12 goal 3 (CPU per run, the client's side): a watcher waiting for runs to end decodes
(or re-reads) a run's snapshot only for the saves that may be a finished run's, told by
``protocol.may_be_finished`` on the bytes, not for each of the five or so saves of an agent run.

Counted on a real nats-server with the bench's stack (engine, worker and client in one process):
the bench's own watcher (whose decodes count in its CPU per run), and the runtime's shared
``RunWatch`` (whose waiters read the snapshot with a KV get each time they were woken; now the
watch hands them the finished snapshot it saw).
"""

from __future__ import annotations

import cProfile
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from bench._stack import Stack, open_stack
from bench.agent import HEADLINE
from dagnats_trio.api import Service
from dagnats_trio.engine import RunSnapshot, decode_snapshot, encode_snapshot
from dagnats_trio.engine.outcome import decode_run_outcome
from dagnats_trio.engine.snapshot import StepState, StepStatus
from dagnats_trio.protocol import (
    DecodeError,
    RunStatus,
    decode_run_header,
    may_be_finished,
)
from dagnats_trio.runtime._watch import RunWatch
from dagnats_trio.testing import AGENT_TASK, ScriptedAgent, agent_workflow, expected_answer

WORKFLOW: Final = "watch-decodes-agent"
WARMUP_RUNS: Final = 2
RUNS: Final = 6
#: Whole-snapshot parses per run by the bench's watcher: 7 while every save of a snapshot was
#: decoded as a header (5 saves per agent run, and the create) and the finished one again whole;
#: 2 while only a save that may be a finished run's (the last) was; 1 since that one is decoded
#: once, whole. The bound allows one save of the next run caught mid-way.
MAX_SNAPSHOT_DECODES_PER_RUN: Final = 1.5
#: Snapshot reads (``Service.get_run``, a KV get and a whole decode) per run waited on through
#: the runtime's ``RunWatch``: one when the wait starts, then one per save that woke it (6.0 per
#: agent run while every save woke its waiters); 2.0 while only a save that may be a finished
#: run's woke them and they read it again; 1.0 since the watch hands them the finished snapshot
#: it saw (decoded once, and only when someone waits).
MAX_SNAPSHOT_READS_PER_WAIT: Final = 1.5
WAIT_S: Final = 60.0


class CountingService(Service):
    """The service, counting the snapshot reads the watch's waiters make."""

    reads = 0

    async def get_run(self, run_id: str) -> RunSnapshot:
        self.reads += 1
        return await super().get_run(run_id)


@asynccontextmanager
async def _agent_stack() -> AsyncIterator[tuple[Stack, trio.Nursery]]:
    """The bench's stack running the scripted agent, and a nursery for a watch beside it."""
    agent = ScriptedAgent(paired=HEADLINE.paired)
    async with (
        open_stack(
            sync_always=False,
            handlers={AGENT_TASK: agent.turn},
            workflows=[agent_workflow(WORKFLOW)],
        ) as stack,
        trio.open_nursery() as nursery,
    ):
        yield stack, nursery


async def _measure() -> tuple[float, float]:
    async with _agent_stack() as (stack, nursery):
        service = CountingService(stack.client_tp)
        watch = RunWatch(stack.client_tp, service)
        await nursery.start(watch.run)
        for _ in range(WARMUP_RUNS):
            await stack.run(WORKFLOW, {"task": "deploy"})
        decodes = stack.snapshot_decodes
        for _ in range(RUNS):
            snap = await stack.run(WORKFLOW, {"task": "deploy"})
            assert snap.outputs().get("agent") == expected_answer()
        snapshot_decodes = (stack.snapshot_decodes - decodes) / RUNS
        # The same runs waited on through the runtime's watch, each wait started with the run.
        waited: list[tuple[str, RunSnapshot]] = []
        for _ in range(RUNS):
            run_id = await stack.service.start_run(WORKFLOW, {"task": "deploy"})
            snap = await watch.wait(run_id, WAIT_S)
            assert snap.status is RunStatus.COMPLETED
            assert snap.outputs().get("agent") == expected_answer()
            waited.append((run_id, snap))
        reads = service.reads / RUNS
        for run_id, snap in waited:  # what a read of the finished run returns
            assert snap == await stack.service.get_run(run_id)
        nursery.cancel_scope.cancel()
    return snapshot_decodes, reads


def test_a_run_watcher_decodes_only_the_saves_of_finished_runs() -> None:
    snapshot_decodes, reads = trio.run(_measure)
    print(
        f"bench watcher: {snapshot_decodes:.1f} snapshot decodes per run; runtime RunWatch: "
        f"{reads:.1f} snapshot reads per run waited on"
    )
    assert 1 <= snapshot_decodes <= MAX_SNAPSHOT_DECODES_PER_RUN
    assert 1 <= reads <= MAX_SNAPSHOT_READS_PER_WAIT


# --- may_be_finished agrees with a decode (a fast path that only skips work) ------------------

_statuses = st.sampled_from([s.value for s in RunStatus])
#: Values a snapshot holds elsewhere, the finished statuses' words among them (a step's status,
#: an output), escapes and non-ASCII text too.
_values = st.recursive(
    st.one_of(
        st.none(),
        st.integers(),
        st.text(max_size=8),
        _statuses,
        st.sampled_from(['"completed"', "failed!", "é", "\x00", "\\u0063"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)


def _spellings(doc: dict[str, Any]) -> list[bytes]:
    """The ways a writer might put ``doc`` in bytes: compact or spaced, ASCII-escaped or not,
    in UTF-8 (with and without a BOM or leading space) and in UTF-16."""
    texts = [
        json.dumps(doc, separators=(",", ":"), ensure_ascii=False),
        json.dumps(doc, ensure_ascii=False),
        json.dumps(doc),
    ]
    out: list[bytes] = []
    for text in texts:
        raw = text.encode("utf-8", "surrogatepass")
        out += [raw, b" " + raw, b"\xef\xbb\xbf" + raw, text.encode("utf-16", "surrogatepass")]
    return out


@settings(deadline=None, max_examples=300)
@given(status=_statuses, extra=st.dictionaries(st.text(max_size=6), _values, max_size=4))
def test_may_be_finished_is_false_only_for_snapshots_that_are_not_finished(
    status: str, extra: dict[str, Any]
) -> None:
    doc = {**extra, "run_id": "r1", "status": status}
    for data in _spellings(doc):
        if may_be_finished(data):
            continue
        try:
            header = decode_run_header(data)
        except DecodeError:
            continue  # not a snapshot at all: nothing for a watcher to see finished
        assert not header.status.finished, data


def test_may_be_finished_on_the_engines_own_snapshots() -> None:
    snap = RunSnapshot(run_id="r1", workflow="w", status=RunStatus.RUNNING)
    assert not may_be_finished(encode_snapshot(snap))
    for status in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED):
        data = encode_snapshot(RunSnapshot(run_id="r1", workflow="w", status=status))
        assert may_be_finished(data)
        assert decode_run_header(data).status is status
    # Text that may spell a status otherwise is let through to a decode.
    assert may_be_finished(b'{"status":"\\u0063ompleted"}')
    assert may_be_finished("{}".encode("utf-16"))
    assert may_be_finished(b"")


# --- the outcome a client reads, against the whole snapshot ------------------------------------

#: Python calls (and built-in ones) to decode a finished agent run's outcome, against those of
#: the whole snapshot (the definition, the outbox and every step's dispatch and timing): the
#: benchmark's client decodes the outcome, at most this share of the whole decode's calls.
MAX_OUTCOME_SHARE_OF_SNAPSHOT_CALLS: Final = 0.4


def _calls(fn: Any, data: bytes) -> int:
    fn(data)  # warm (cattrs builds its hooks on first use)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        fn(data)
    finally:
        profiler.disable()
    profiler.create_stats()
    stats: dict[Any, Any] = profiler.stats  # type: ignore[attr-defined]
    return sum(v[1] for v in stats.values()) - 1  # less the ``disable`` call


def _agrees(snap: RunSnapshot) -> None:
    outcome = decode_run_outcome(encode_snapshot(snap))
    assert (outcome.run_id, outcome.status, outcome.error) == (snap.run_id, snap.status, snap.error)
    assert outcome.outputs() == snap.outputs()
    assert {sid: st.status for sid, st in outcome.steps.items()} == {
        sid: st.status for sid, st in snap.steps.items()
    }


async def _finished_agent_snapshot() -> RunSnapshot:
    async with _agent_stack() as (stack, nursery):
        watch = RunWatch(stack.client_tp, stack.service)
        await nursery.start(watch.run)
        run_id = await stack.service.start_run(WORKFLOW, {"task": "deploy"})
        snap = await watch.wait(run_id, WAIT_S)
        nursery.cancel_scope.cancel()
    return snap


def test_a_runs_outcome_is_what_its_snapshot_says_for_fewer_calls() -> None:
    snap = trio.run(_finished_agent_snapshot)
    assert snap.status is RunStatus.COMPLETED and snap.outputs()
    _agrees(snap)
    data = encode_snapshot(snap)
    outcome_calls, snapshot_calls = _calls(decode_run_outcome, data), _calls(decode_snapshot, data)
    print(
        f"calls to decode a finished agent run: outcome {outcome_calls}, whole snapshot "
        f"{snapshot_calls} ({len(data)} bytes)"
    )
    assert 0 < outcome_calls <= MAX_OUTCOME_SHARE_OF_SNAPSHOT_CALLS * snapshot_calls
    # Every run and step status, outputs of completed steps only, an error kept.
    steps = {
        f"s{n}": StepState(step_id=f"s{n}", status=status, output={"n": n}, error="e")
        for n, status in enumerate(StepStatus)
    }
    for status in RunStatus:
        _agrees(RunSnapshot(run_id="r", workflow="w", status=status, error="boom", steps=steps))
    _agrees(RunSnapshot(run_id="r", workflow="w", status=RunStatus.RUNNING))
