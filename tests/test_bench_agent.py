"""``just bench agent`` (issue 12): the headline's derivation and its constants tell one story,
and the bench's own write counter finds the derivation's durable writes per tool iteration.

The bench measures round trips and durable writes per run and prints them beside these
constants; a derivation whose prose and numbers drift apart would make the comparison lie.
"""

from __future__ import annotations

import re

from bench._stack import _socket_writes_of, open_stack
from bench.agent import (
    ALONE,
    ALONE_DURABLE_WRITES_PER_RUN,
    ALONE_DURABLE_WRITES_PER_TOOL_ITERATION,
    ALONE_MIN_ROUND_TRIPS_PER_RUN,
    DURABLE_WRITES_PER_RUN,
    DURABLE_WRITES_PER_TOOL_ITERATION,
    ENGINE_ROUND_TRIPS_PER_RUN,
    HEADLINE,
    MIN_ROUND_TRIPS_DERIVATION,
    MIN_ROUND_TRIPS_PER_RUN,
    MIN_ROUND_TRIPS_PER_TOOL_ITERATION,
    OFF_PATH_PER_RUN,
    PULLS_PER_RUN,
    WORKER_ROUND_TRIPS_PER_RUN,
    WRITES_RUNS,
    _handlers_and_workflows,
    durable_writes,
    round_trips_per_run,
    sequential_interleaved,
)


def _number_before(phrase: str) -> int:
    found = re.findall(rf"(\d+) {phrase}", MIN_ROUND_TRIPS_DERIVATION)
    assert len(found) == 1, f"{phrase!r}: {found}"
    return int(found[0])


def test_the_headline_pairs_its_records_and_the_script_writing_each_alone_is_beside_it() -> None:
    # Each pair is one message (a record group), one publish: fewer durable writes at the cost
    # of single publishes, so the paired script is the headline (docs/jetstream.md, "Cost").
    assert HEADLINE.paired
    assert not ALONE.paired
    names = {HEADLINE.task, HEADLINE.long_task, ALONE.task, ALONE.long_task}
    assert len(names) == 4


def test_the_derivation_states_the_constants() -> None:
    assert _number_before("counted,") == MIN_ROUND_TRIPS_PER_RUN == 31
    waited = MIN_ROUND_TRIPS_PER_RUN - PULLS_PER_RUN - OFF_PATH_PER_RUN
    assert _number_before(r"on the critical path\.") == waited == 25
    # The answer iteration: its model record and complete commit one message (then_complete),
    # its claim fenced on the predicted tail (no tail read).
    assert _number_before(r"round trips \(claim, model record \+ commit") == 3
    assert _number_before(r"\(answer\)") == 3
    assert _number_before(r"\(tool iterations\)") == 4
    assert _number_before("durable writes per run:") == DURABLE_WRITES_PER_RUN == 27
    assert _number_before(r"\(worker\s+3 x 6 \+ 4\)") == ALONE_DURABLE_WRITES_PER_RUN == 34
    assert _number_before("durable writes per tool iteration;") == (
        DURABLE_WRITES_PER_TOOL_ITERATION
    ) == 6  # fmt: skip
    assert _number_before(r"round trips counted \(") == MIN_ROUND_TRIPS_PER_TOOL_ITERATION == 6
    assert _number_before("durable writes and 8") == ALONE_DURABLE_WRITES_PER_TOOL_ITERATION
    assert _number_before("round trips per run, 32") == ALONE_MIN_ROUND_TRIPS_PER_RUN == 38
    assert PULLS_PER_RUN == 0  # the engine's feeds keep one waiting; the worker's acks carry its
    alone_waited = ALONE_MIN_ROUND_TRIPS_PER_RUN - PULLS_PER_RUN - OFF_PATH_PER_RUN
    assert _number_before("of them waited on") == alone_waited == 32
    # Each tool iteration pairs away two of the worker's writes.
    assert ALONE_DURABLE_WRITES_PER_TOOL_ITERATION - DURABLE_WRITES_PER_TOOL_ITERATION == 2


async def test_the_bench_counts_the_derivations_writes() -> None:
    """On a real nats-server, counted by the bench's own write counter: 6 durable writes per
    tool iteration for the headline (claim, model + intent message, result + commit message,
    lifecycle event, snapshot CAS, task publish), 8 with each record alone; 27 per run for the
    headline (the answer's model record stored with its complete commit; the first task
    published by the start, the engine's repeat of it a duplicate, not stored), 34 alone."""
    headline, headline_run = await durable_writes(HEADLINE)
    alone, alone_run = await durable_writes(ALONE)
    print(f"writes per tool iteration: headline {headline}, each record alone {alone}; "
          f"per run: headline {headline_run}, each record alone {alone_run}")  # fmt: skip
    assert headline == DURABLE_WRITES_PER_TOOL_ITERATION == 6
    assert alone == ALONE_DURABLE_WRITES_PER_TOOL_ITERATION == 8
    assert headline_run == DURABLE_WRITES_PER_RUN == 27
    assert alone_run == ALONE_DURABLE_WRITES_PER_RUN == 34


async def test_the_worker_claims_without_reading_the_tail() -> None:
    """On a real nats-server, counted by the worker's transport: 4 round trips per tool
    iteration (claim, two journal messages, lifecycle event) and 3 for the answer, 15 per run
    (19 when the worker's loop sent a pull request per task: each ack now carries it). Each
    claim is fenced on the commit the worker stored in the iteration before (or on an empty
    subject), so no tail read precedes it (journal/_open.py, the predicted claim): one more per
    iteration when each claim read first. The pull loop re-polls about once a second when
    idle, hence the margin of less than one."""
    _, per_run = await round_trips_per_run(HEADLINE)
    print(f"worker round trips per run: {per_run}")
    assert WORKER_ROUND_TRIPS_PER_RUN == 15
    assert WORKER_ROUND_TRIPS_PER_RUN <= per_run < WORKER_ROUND_TRIPS_PER_RUN + 1


async def test_the_workers_acks_carry_its_pull_requests() -> None:
    """On a real nats-server, the worker's connection writes 19 times per run: a write per round
    trip (15) and an ack per task (4), each ack carrying the pull request of the next task (an
    ack with next). 23 when its loop sent a pull request per task (4 more writes, 4 more round
    trips); the idle poll of a loaded machine may add one."""
    handlers, workflows = _handlers_and_workflows((HEADLINE,))
    async with open_stack(sync_always=False, handlers=handlers, workflows=workflows) as stack:
        await stack.run(HEADLINE.workflow, {"task": "deploy"})
        writes, trips = _socket_writes_of(stack.worker_tp), stack.counts().worker
        for _ in range(WRITES_RUNS):
            await stack.run(HEADLINE.workflow, {"task": "deploy"})
        per_run = (_socket_writes_of(stack.worker_tp) - writes) / WRITES_RUNS
        trips_per_run = (stack.counts().worker - trips) / WRITES_RUNS
    print(f"worker socket writes per run: {per_run}, round trips {trips_per_run}")
    assert WORKER_ROUND_TRIPS_PER_RUN == 15
    assert 15 + 4 <= per_run < 15 + 4 + 1
    assert 15 <= trips_per_run < 15 + 1


async def test_the_two_scripts_sequential_runs_are_taken_in_turn() -> None:
    """On a real nats-server: the headline's and the each-record-alone script's sequential runs
    alternate, one of each in turn, so both are timed under the same load and server state (run
    as two blocks 10 s apart, the script with 7 more fsynced writes per run once came out at
    0.97x the headline). Each run is counted for its own script: the round trips per run of
    each are its derivation's (the engine's idle polls aside)."""
    handlers, workflows = _handlers_and_workflows((HEADLINE, ALONE))
    pair = (HEADLINE.workflow, ALONE.workflow)
    async with open_stack(sync_always=False, handlers=handlers, workflows=workflows) as stack:
        seq = await sequential_interleaved(stack, 1.0, pair)
    print(f"order of {len(seq.order)} runs: {seq.order[:6]} ...")
    assert len(seq.order) >= 2 and len(seq.order) % 2 == 0
    assert seq.order == [pair[i % 2] for i in range(len(seq.order))]
    for workflow, minimum in ((pair[0], MIN_ROUND_TRIPS_PER_RUN),
                              (pair[1], ALONE_MIN_ROUND_TRIPS_PER_RUN)):  # fmt: skip
        figures = seq.by_workflow[workflow]
        assert len(figures.times) == len(seq.order) // 2
        per_run = figures.counts.total / len(figures.times)
        print(f"{workflow}: {per_run:.2f} round trips per run")
        assert minimum - 1 < per_run < minimum + 1


async def test_the_engine_sends_no_pull_request_per_event() -> None:
    """On a real nats-server, counted by the engine's transport: 10 round trips per run (for the
    start the service dispatched, the task repeated, its snapshot rebuilt from the event, not
    read: 11 when read; a CAS and a task publish per later dispatch, 3; the run's end CAS and
    two purges) and no pull request per event: its history and timer loops fetch from feeds
    (``Transport.consume``) that keep one pull request of 64 waiting. 15 per run when each of
    the 5 events cost a pull request of its own. A feed asks again when its request expires
    (every 5 s while idle), and a run's two purges follow its end, so the last counted run's
    may land after the count and the uncounted first run's inside it: hence the margin of less
    than one either way."""
    per_run, _ = await round_trips_per_run(HEADLINE)
    print(f"engine round trips per run: {per_run}")
    assert ENGINE_ROUND_TRIPS_PER_RUN == 10
    assert ENGINE_ROUND_TRIPS_PER_RUN - 1 < per_run < ENGINE_ROUND_TRIPS_PER_RUN + 1
