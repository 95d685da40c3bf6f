"""The scripted agent of the crash matrix, crash-free, on a real server (issue 4).

Four iterations: model + safe tool, model + unsafe tool, model + safe tool, model + answer
(4 model calls, 3 tool calls). Sequential runs for ``SEQUENTIAL_S`` seconds give p50/p99 ms per
run and round trips per run; then ``BURST_RUNS`` runs started at once give runs per second.
Both durability settings are measured; see ``MIN_ROUND_TRIPS_DERIVATION`` for the floor the spec
sets. The measured count also holds the idle polls of the worker's pull loop (about one a second
while idle: a request of the loop's when those its acks carried expired)
and the pull requests the engine's two loops ask again when theirs expires (one each
STANDING_PULL_EXPIRES_S, 5 s, while idle), so it sits a fraction above the floor.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import trio

from dagnats_trio.testing import (
    AGENT_TASK,
    DEFAULT_SCRIPT,
    ScriptedAgent,
    agent_workflow,
    expected_answer,
)
from dagnats_trio.worker import Handler

from ._stack import Counts, Stack, open_stack, percentile
from .cpu_floor import cpu_floor_line


@attrs.frozen
class _Variant:
    """One way of writing the script: its task (handler) names and workflows, short and long."""

    task: str
    workflow: str
    long_workflow: str
    paired: bool

    @property
    def long_task(self) -> str:
        return f"{self.task}-long"

    def agents(self) -> tuple[ScriptedAgent, ScriptedAgent]:
        return (
            ScriptedAgent(task=self.task, paired=self.paired),
            ScriptedAgent(LONG_SCRIPT, task=self.long_task, paired=self.paired),
        )


SEQUENTIAL_S = 10.0
SEQUENTIAL_S_QUICK = 2.0
WARMUP_RUNS = 5
BURST_RUNS = 50

#: What the spec requires, and which of it must wait on the critical path.
MIN_ROUND_TRIPS_DERIVATION = """
A round trip is a request that waits for the server's answer, as the transport counts it. A
durable write is one that the server stores (and, with sync_interval always, fsyncs) before it
answers: a publish, an atomic batch of publishes (stored whole or not at all), a KV write. Acks
are neither (sent without waiting).

The headline is the scripted agent storing its records in pairs (then_tool / then_continue /
then_complete): the model response with the tool intent it leads to, the tool result with the
continue commit, and the final answer with the complete commit, each pair ONE message on the
journal subject (a record group: atomic because it is one
message, fenced once like any record, docs/journal-wire-format.md), so a pair costs one
publish. The same script writing each record alone is printed beside it. (Before record groups a
pair was a JetStream atomic batch, which nats-server 2.15.1 stages in a file store of its own on
a single-replica file stream, ~2.3 ms per batch against 0.34 ms for an fsync'd publish, so the
headline then wrote each record alone; a pair over MAX_GROUP_MESSAGE_BYTES still goes as a
batch; docs/jetstream.md, "Cost".)

Per tool iteration of a journal step (model call + tool call), the records paired:
 worker  pull request       NOT a round trip: the ack of the worker's task before carried it
                            (an ack with next, +NXT: the ack and a pull request of one task for
                            the place it frees, one message; worker._finish, Transport.pull),
                            left waiting on the server before this task is stored, so the task
                            arrives with no request of its own, on the wire or on the critical
                            path. The loop asks for its free places itself only when nothing is
                            asked (the first task, or after the requests expired: every 1 s
                            while idle), when another task type's loop waits for a place, or
                            when the worker is full (each its own request, as before).
         tail read          NOT a round trip: the spec's "reads the journal tail from the stream
                            leader" is answered by the claim's ack (the predicted claim,
                            journal/_open.py). The worker stored the commit the task names
                            (journal_seq: the previous iteration's continue commit, the last
                            record of its result + commit message) and remembers it, content
                            and sequence (KnownCommits); on a first iteration the subject is
                            empty. So it claims fenced on that sequence (0: empty) without
                            reading: the leader stores the claim only if the tail is exactly
                            that record, compared atomically with the store, so an ack means
                            the read would have returned it (not stale: a commit of the
                            iteration before; the restart limit not reached: no claim after
                            it) and the state is that commit's, already known. A refused claim
                            stores nothing and fences the holder, as a claim refused after a
                            read does; a redelivery, a retry, or a task whose commit another
                            worker stored read the tail first (one round trip more).
         claim              WRITE 1. Required: Journal() appends it before it returns; it fences
                            every earlier claim and counts toward the restart limit, so it cannot
                            wait for a later record. Fenced on the predicted tail, it is also the
                            tail read above.
         model tail read    NOT a round trip: the spec's "reads the tail first, so a holder that
                            is already fenced does not spend a model call" is answered by the
                            claim's ack. A fenced append is stored only on the tail, so its ack
                            proves this holder held the tail as a read's answer does; one that
                            arrived less than TAIL_PROOF_FRESH_S (20 ms) ago, to a holder still
                            writable with its lease, stands for the read (journal/_fencing.py
                            argues the bound against the AckWait and heartbeat). The model call
                            follows the claim at once, so the read is made only after a stall.
         model record +     WRITE 2: one message holding both, fenced on the claim's sequence.
         tool intent        The response is durable before anything acts on it, and the intent
                            is stored before the tool starts, as the spec requires. Stored
                            apart, the intent would be a write of its own: the server cannot
                            check a sequence it has not assigned yet, so two fenced publishes
                            cannot be sent together. A crash before the message stores neither
                            (the model is asked again, which the spec allows; nothing ran).
         tool result +      WRITE 3: one message holding both, fenced on the model + intent
         commit             message's sequence; the commit is stored before the event, as the
                            spec requires, and the result with it (a crash before the message
                            leaves the intent open: an unsafe tool is answered interrupted,
                            never started twice).
         lifecycle event    WRITE 4: required, on the history stream; it carries the commit's
                            sequence (the message's), so it also waits for the commit.
         task ack           NOT a round trip: sent without waiting (ack_nowait; with next, above)
                            once the event is stored; a lost ack is a redelivery that the
                            journal answers with Committed and the stream's msg id / the
                            engine's acceptance rule drop (and its request is asked again by the
                            loop when the request's expiry passes).
                            Nor a write: the task stream is a limits stream, so the ack moves
                            the consumer's ack floor and removes nothing (a work queue's ack
                            wrote a tombstone, fsynced under sync_interval always).
 engine  pull request       NOT a round trip per event: the engine's loops fetch from a feed
                            (Transport.consume) that keeps one pull request of 64 deliveries
                            waiting on the server, asked again only when used up, expired
                            (every 5 s while idle) or lost (a reconnect), so an event arrives
                            with no request of its own, on the wire or on the critical path.
                            (A worker cannot keep one: what it asks is bounded by its free
                            places; its acks ask for the next task instead, above.)
         snapshot CAS       WRITE 5: the dispatch is saved before the task is published (the KV
                            bucket is a stream of its own: no message or batch with the task).
                            It names the run's definition by reference (stored once per
                            definition, engine._definition_refs), not inline: ~0.3 KB less
                            fsynced and delivered to each watch per save.
         task publish       WRITE 6: stored before the event is acked (else a crash after the
                            ack would lose the dispatch).
         event ack          NOT a round trip: ack_nowait after the task is stored; a lost ack is
                            a redelivery that the snapshot's outbox replays idempotently.
 => 6 durable writes per tool iteration; 6 round trips counted (6 waited on; before the
    worker's acks carried its pull requests, 7: one request per task).

Per answer iteration (the last model call gives the final answer), the records paired:
 worker  pull request (carried by the ack before), claim (no tail read), model tail read: as
         above (claim: WRITE 1).
         model record +     WRITE 2: one message holding both, fenced on the claim's sequence
         complete commit    (then_complete: the handler says, with the model call, which output
                            and state a final answer completes the step with; the journal calls
                            that plain function between the two records, so no handler code runs
                            there). The commit is stored before the event, as the spec requires,
                            and the response with it: a crash before the message stores neither
                            (the model is asked again, which the spec allows; nothing ran); a
                            crash after it finds the step committed (the redelivery's claim
                            answers Committed and resends the event; the model is not asked).
                            Stored apart (as before then_complete), the response was a write of
                            its own, fenced on the claim, and the commit one more fenced on it.
         lifecycle event    WRITE 3 (step.completed), as above.
 engine  snapshot CAS (the run's end); no task. The active marker's purge and
         the purge of the run's tasks follow the saved snapshot, off the critical path, sent
         together by the engine's run-end task while its history loop goes on (engine._run_end,
         engine._run_ends).
 => worker 3 round trips (claim, model record + commit, event: 3 writes; one write
    less than the 4 round trips and 4 writes of the answer's record stored alone), engine 1
    (the CAS).

Why not 5 (the issue's goal): each of the 6 is a write the spec orders before the next, and
no two of them can share a message. The claim is stored before Journal() returns, so before the
model call whose response the next message holds. The commit is stored before the lifecycle
event ("after the commit is stored, the worker publishes the lifecycle event"), and the event is
on the history stream, not the journal's: one message (or one atomic batch) holds one stream's
records only. The engine saves the dispatch (CAS on the run's snapshot, a KV bucket) before it
publishes the task (the task queue, a stream of its own), so that a crash between the two
re-sends the same dispatch instead of deciding again. Five would need two of these streams made
one (tasks kept in the snapshot bucket's stream, say: the task stream is a limits stream now, so
retention no longer forbids it, but a snapshot and a task are still two messages, so one write
would be an atomic batch, which costs more than two publishes on a single-replica file stream,
docs/jetstream.md "Cost") or a write the spec requires dropped. Not done.

Each record alone (printed beside): the model record, the tool intent, the tool result and the
commit are a write each, each fenced on the one before: 8 durable writes and 8 round trips per
tool iteration, and the answer's model record a write of its own too (worker 4 round trips in
the answer iteration): 38 round trips per run, 32 of them waited on.

Per run (3 tool iterations, 1 answer iteration), the records paired:
 client  run index entry and active marker, sent with               6  (the definition may be
         the definition read (three requests at once: one              re-registered at any time:
         waited) + snapshot create, holding the first                  reading it is the only
         dispatch (engine.start_dispatched) + the first                way to start the current;
         task and workflow.started (two publishes at once,             the index is written
         each with its msg id: one waited)                             before the snapshot, so a
                                                                       run never goes unlisted.
                                                                       A service's first start
                                                                       of a workflow reads before
                                                                       it writes: one more waited,
                                                                       engine._store.index_start;
                                                                       with an idempotency key:
                                                                       the key's claim beside the
                                                                       read, then the index, one
                                                                       more too)
 engine  workflow.started: the task repeated (a                      1  (off the critical path:
         duplicate by its msg id: the server stores                    the worker has the task
         nothing), as for an event that comes again after              already. The engine's
         the engine's own crash between its save and its               CAS and its hop were on
         publish (core.service_start_entry). No snapshot               it: 27 waited before.
         read: the event names the snapshot's revision and             A start the service
         the ids its dispatch drew, and the engine rebuilds            does not dispatch (its
         it (engine._store.started_with,                               first of a workflow, a
         core.first_dispatch_again); the copy is kept, so              timer or a child at the
         step.continue reads nothing                                   start) is the engine's:
                                                                       CAS + task, with no read,
                                                                       engine._store.
                                                                       started_with)
 worker  3 x 4 (tool iterations) + 3 (answer)                       15
 engine  3 x step.continue (CAS + task) + step.completed            9
         (CAS + active marker purge + task purge, the
         two at once after the finished snapshot is saved: off
         the critical path)
 => 31 counted, of which 6 overlap or follow the worker's first task or the run's end (the
    definition read and the second index publish, each sent with the first index publish;
    workflow.started, sent with the first task; the engine's repeated task; the two purges):
    25 on the critical path. (Each record alone: 38 and 32. Before the engine rebuilt the
    snapshot of a start the service dispatched (it read it: one more, off the path): 32 and
    25, 39 and 32 each record alone. Before the
    service dispatched the first step (the engine's CAS + task on the critical path, the
    start's event alone): 31 and 27, 38 and 34 each record alone. Before the worker's acks carried
    its pull requests (a request per task, 4 per run, left waiting before the task: 44 socket
    writes per run under `just bench --profile`, now 40): 35 and 42, and the figures that
    follow count those 4 too. Before the start indexed the run beside its definition read (the read,
    then the index): 28 on the critical path, 35 each record alone. Before the engine's loops
    kept a pull request waiting (a request per event, 5 per run: 49 socket writes per run):
    40 and 47, and the figures that follow count those 5 too. Before the run's end purged its
    tasks (each ack removed its own, a work queue): one round trip less, 39 and 46. Before the
    claim's ack stood for the journal tail read (the predicted claim):
    43 and 32, one read more per iteration. Before the answer was stored with its complete
    commit: one write more. Before the claim's ack stood for the model's tail read: one read
    more per model call; before the start named its snapshot's revision: the engine's snapshot
    read.)
 => 27 durable writes per run: client 5 (run index entry, active marker, snapshot create,
    first task, workflow.started), engine 7 (a CAS and a task per dispatch after the first:
    3 x 2, and the run's end CAS; the first task repeated is a duplicate, not stored),
    worker 15 (3 x 4 per tool iteration + 3 for the answer). Each record alone: 34 (worker
    3 x 6 + 4). Before the service dispatched the first step: 28 (the engine's start CAS).
    Before then_complete: 29.
 => fsynced writes per run with sync_interval always (bench.spread counts them per stream):
    the 27, and the two purges of the run's end (one fsync each, whatever they remove): 29.
    Neither purge empties its stream (each holds a sentinel, transport.provision), so neither
    makes the server replace the stream's block file between two runs.
    Before the task stream stopped being a work queue: 33 (a tombstone per task ack, 4, and
    no task purge).
"""
#: The worker's share of it: per tool iteration 4 (claim, model + intent message, result +
#: commit message, lifecycle event), for the answer 3 (claim, model + commit message, lifecycle
#: event); no pull request (each ack carries the next: an ack with next).
WORKER_ROUND_TRIPS_PER_RUN = 3 * 4 + 3
#: The engine's: for the start the service dispatched, its task repeated (a duplicate; the
#: snapshot rebuilt from the event, not read); per later dispatch a CAS and a task publish (3
#: step.continue), then the run's end CAS and its two purges; no pull request (its feeds keep
#: one waiting).
ENGINE_ROUND_TRIPS_PER_RUN = 1 + 3 * 2 + 3
#: The client's: the definition read and the index pair (three at once), the snapshot create,
#: the first task and workflow.started (two at once).
CLIENT_ROUND_TRIPS_PER_RUN = 3 + 1 + 2
#: Requests counted per run at the floor of MIN_ROUND_TRIPS_DERIVATION (the records paired).
MIN_ROUND_TRIPS_PER_RUN = (
    CLIENT_ROUND_TRIPS_PER_RUN + ENGINE_ROUND_TRIPS_PER_RUN + WORKER_ROUND_TRIPS_PER_RUN
)
#: The same for the script writing each record alone: two more worker writes per tool iteration,
#: and one more in the answer iteration (the model record apart from the complete commit).
ALONE_MIN_ROUND_TRIPS_PER_RUN = MIN_ROUND_TRIPS_PER_RUN + 3 * 2 + 1
#: Of those, the pull requests, left waiting before their message arrives: none per run at the
#: floor (the engine's feeds keep one waiting for 64 events; the worker's acks carry its next).
PULLS_PER_RUN = 0
#: Fetches that return deliveries per run on the critical path: the engine's 4 events after the
#: start (the start's, which the service dispatched, is off the path) and the worker's 4 tasks.
FETCHES_PER_RUN = 4 + 4
#: And those not waited on: the client's definition read and its second index publish, both sent
#: with the first index publish, its workflow.started, sent with the first task, the engine's
#: handling of that event (the task repeated, while the worker has the task), and the two
#: purges after the run's end (its active marker, its tasks).
OFF_PATH_PER_RUN = 6
#: Per tool iteration: worker 4 waited on, engine 2 waited on (no pull request counted).
MIN_ROUND_TRIPS_PER_TOOL_ITERATION = 6
#: Durable writes per tool iteration, the records paired (worker: claim, model + intent
#: message, result + commit message, lifecycle event; engine: snapshot CAS, task publish).
DURABLE_WRITES_PER_TOOL_ITERATION = 6
#: The same with each record alone (model record, intent, result and commit a write each).
ALONE_DURABLE_WRITES_PER_TOOL_ITERATION = 8
#: Durable writes per run, the records paired: client 5 (with the first task), engine 3 x 2 + 1
#: (the first task it repeats is a duplicate, not stored), worker 3 x 4 + 3 (the answer's model
#: record and complete commit one message: ``then_complete``).
DURABLE_WRITES_PER_RUN = 5 + (3 * 2 + 1) + (3 * 4 + 3)
#: The same with each record alone: two more per tool iteration, one more for the answer.
ALONE_DURABLE_WRITES_PER_RUN = DURABLE_WRITES_PER_RUN + 3 * 2 + 1
#: Writes per tool iteration are measured, not derived: runs of the script, and of a script
#: with its tool turns twice (``LONG_SCRIPT``), each this many times; the difference in durable
#: writes per run over the difference in tool iterations is what one tool iteration costs.
WRITES_RUNS = 5
LONG_SCRIPT = (*DEFAULT_SCRIPT[:-1], *DEFAULT_SCRIPT[:-1], DEFAULT_SCRIPT[-1])
#: The headline: the records paired, each pair one message (``then_tool`` / ``then_continue`` /
#: ``then_complete``).
HEADLINE = _Variant(AGENT_TASK, "bench-agent", "bench-agent-long", paired=True)
#: Beside it: each record written alone, a durable write each.
ALONE = _Variant("bench-agent-alone", "bench-agent-alone", "bench-agent-alone-long", paired=False)

#: Peers' published figures on this 2-core machine, same 4-model-call, 3-tool-call run.
PEERS = (
    ("LangGraph in-process + SQLite checkpointer", "8.5 ms p50"),
    ("Restate", "13.0 ms p50, 142 runs/s with 50 at once"),
    ("DBOS", "17-25 ms"),
)


@attrs.frozen
class Sequential:
    """One script's sequential runs: each run's ms, the round trips they counted, CPU per run."""

    times: list[float]
    counts: Counts
    cpu_ms: float


@attrs.frozen
class Interleaved:
    """Sequential runs of several scripts taken in turn (``order``: each run's workflow, in the
    order they ran) and each script's figures."""

    order: list[str]
    by_workflow: dict[str, Sequential]


async def sequential_interleaved(
    stack: Stack, seconds: float, workflows: tuple[str, ...]
) -> Interleaved:
    """Runs of ``workflows`` one after another, in turn (one run of each, then again), for
    ``seconds`` per workflow, after ``WARMUP_RUNS`` of each. In turn, not one script's block
    after the other's: the machine's load and the server's state drift over seconds here (a
    script measured 20 s after another on a shared 2-core machine was seen 20% slower or faster
    for that alone, so the each-record-alone script once came out at 0.97x the headline with 7
    more fsynced writes per run); taken in turn, both see the same conditions and the ratio
    between them is what their writes cost. What a run leaves behind off the critical path (the
    run's end purges) is counted in the next run's window, which is the other script's: the same
    for every script, so it evens out."""
    answer = expected_answer()
    for workflow in workflows:
        for _ in range(WARMUP_RUNS):
            await stack.run(workflow, {"task": "deploy"})
    times: dict[str, list[float]] = {w: [] for w in workflows}
    counts = {w: Counts(0, 0, 0) for w in workflows}
    cpu_s = dict.fromkeys(workflows, 0.0)
    order: list[str] = []
    deadline = time.perf_counter() + seconds * len(workflows)
    while time.perf_counter() < deadline:
        for workflow in workflows:
            before, cpu_before = stack.counts(), time.process_time()
            start = time.perf_counter()
            snap = await stack.run(workflow, {"task": "deploy"})
            times[workflow].append((time.perf_counter() - start) * 1000)
            cpu_s[workflow] += time.process_time() - cpu_before
            counts[workflow] = counts[workflow] + (stack.counts() - before)
            order.append(workflow)
            outputs = snap.outputs()
            if outputs.get("agent") != answer:
                raise RuntimeError(f"wrong answer {outputs!r} (status {snap.status.value})")
    return Interleaved(
        order,
        {
            w: Sequential(times[w], counts[w], cpu_s[w] * 1000 / max(1, len(times[w])))
            for w in workflows
        },
    )


async def _writes_per_tool_iteration(stack: Stack, variant: _Variant) -> tuple[float, Counts]:
    """Durable writes one tool iteration costs (worker + engine), measured as the difference
    between the long and the default script; and the default script's writes per run."""
    per_run: list[Counts] = []
    for workflow, script in (
        (variant.workflow, DEFAULT_SCRIPT),
        (variant.long_workflow, LONG_SCRIPT),
    ):
        # One run first, uncounted: a stack's first runs (and the tail of a burst before) may
        # make writes a steady run does not (a snapshot CAS that lost a race and is retried).
        await stack.run(workflow, {"task": "deploy"})
        before = stack.writes()
        for _ in range(WRITES_RUNS):
            snap = await stack.run(workflow, {"task": "deploy"})
            if snap.outputs().get("agent") != expected_answer(script):
                raise RuntimeError(f"wrong answer {snap.outputs()!r}")
        per_run.append(stack.writes() - before)
    tools = [sum(1 for t in s if t.tool is not None) for s in (DEFAULT_SCRIPT, LONG_SCRIPT)]
    extra = per_run[1] - per_run[0]
    per_tool = (extra.engine + extra.worker) / WRITES_RUNS / (tools[1] - tools[0])
    return per_tool, per_run[0]


async def _burst(stack: Stack, workflow: str, runs: int = BURST_RUNS) -> float:
    """Start ``runs`` runs at once; runs/s until the last one ends."""
    answer = expected_answer()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:

        async def one() -> None:
            snap = await stack.run(workflow, {"task": "deploy"})
            if snap.outputs().get("agent") != answer:
                raise RuntimeError(f"wrong answer {snap.outputs()!r}")

        for _ in range(runs):
            nursery.start_soon(one)
    return runs / (time.perf_counter() - start)


@attrs.frozen
class _Figures:
    """One variant's figures in one run."""

    times: list[float]
    counts: Counts
    cpu_ms: float
    rate: float
    writes_per_tool_iteration: float
    writes_per_run: Counts


async def _figures(stack: Stack, variant: _Variant, seq: Sequential) -> _Figures:
    rate = await _burst(stack, variant.workflow)
    per_tool, per_run = await _writes_per_tool_iteration(stack, variant)
    return _Figures(seq.times, seq.counts, seq.cpu_ms, rate, per_tool, per_run)


def _handlers_and_workflows(
    variants: tuple[_Variant, ...],
) -> tuple[dict[str, Handler], list[dict[str, Any]]]:
    handlers: dict[str, Handler] = {}
    workflows: list[dict[str, Any]] = []
    for v in variants:
        short, long = v.agents()
        handlers |= {v.task: short.turn, v.long_task: long.turn}
        workflows += [
            agent_workflow(v.workflow, task=v.task),
            agent_workflow(v.long_workflow, task=v.long_task),
        ]
    return handlers, workflows


async def durable_writes(variant: _Variant, *, sync_always: bool = False) -> tuple[float, float]:
    """Durable writes one tool iteration of ``variant`` costs (worker + engine), and one run of
    the default script (client + engine + worker), counted as the bench counts them, on a
    server of its own."""
    handlers, workflows = _handlers_and_workflows((variant,))
    async with open_stack(sync_always=sync_always, handlers=handlers, workflows=workflows) as stack:
        per_tool, w = await _writes_per_tool_iteration(stack, variant)
        return per_tool, (w.client + w.engine + w.worker) / WRITES_RUNS


async def round_trips_per_run(variant: _Variant, runs: int = WRITES_RUNS) -> tuple[float, float]:
    """Round trips the engine's and the worker's transports count per run of ``variant`` (pull
    requests included), over ``runs`` runs after one uncounted, on a server of its own."""
    handlers, workflows = _handlers_and_workflows((variant,))
    async with open_stack(sync_always=False, handlers=handlers, workflows=workflows) as stack:
        await stack.run(variant.workflow, {"task": "deploy"})
        before = stack.counts()
        for _ in range(runs):
            snap = await stack.run(variant.workflow, {"task": "deploy"})
            if snap.outputs().get("agent") != expected_answer():
                raise RuntimeError(f"wrong answer {snap.outputs()!r}")
        counted = stack.counts() - before
        return counted.engine / runs, counted.worker / runs


async def _measure(sync_always: bool, seconds: float) -> tuple[float, float, _Figures, _Figures]:
    """The publish floor and the CPU floor (per round trip), then the headline's figures and
    the each-record-alone script's, on one stack."""
    handlers, workflows = _handlers_and_workflows((HEADLINE, ALONE))
    async with open_stack(sync_always=sync_always, handlers=handlers, workflows=workflows) as stack:
        floor_us = await stack.publish_floor_us()
        cpu_floor_us = await stack.cpu_floor_us()
        seq = await sequential_interleaved(stack, seconds, (HEADLINE.workflow, ALONE.workflow))
        headline = await _figures(stack, HEADLINE, seq.by_workflow[HEADLINE.workflow])
        alone = await _figures(stack, ALONE, seq.by_workflow[ALONE.workflow])
        return floor_us, cpu_floor_us, headline, alone


def run(*, quick: bool = False) -> dict[str, float]:
    seconds = SEQUENTIAL_S_QUICK if quick else SEQUENTIAL_S
    print(f"== agent: scripted agent (4 model calls, 3 tool calls), crash-free, records paired "
          f"(model + intent, result + commit, answer + complete commit: one message each; the "
          f"script writing each record alone beside it); sequential for {seconds:.0f} s each "
          f"(the two scripts' runs taken in turn), then {BURST_RUNS} runs at once")  # fmt: skip
    figures: dict[str, float] = {}
    for sync_always, label, key in (
        (True, "single node, sync_interval always", "agent_fsync"),
        (False, "sync_interval default (a cluster relies on replicas)", "agent"),
    ):
        floor_us, cpu_floor_us, m, alone = trio.run(_measure, sync_always, seconds)
        n = len(m.times)
        p50, p99 = percentile(m.times, 50), percentile(m.times, 99)
        per = (m.counts.engine / n, m.counts.worker / n, m.counts.client / n)
        total = sum(per)
        print(f"  {label}:")
        print(f"    {n} sequential runs: p50 {p50:.1f} ms, p99 {p99:.1f} ms per run; "
              f"{m.cpu_ms:.1f} ms of this process's CPU per run")  # fmt: skip
        cpu_line, cpu_ratio = cpu_floor_line(m.cpu_ms, cpu_floor_us, total)
        print(f"    {cpu_line}")
        waited = MIN_ROUND_TRIPS_PER_RUN - PULLS_PER_RUN - OFF_PATH_PER_RUN
        print(f"    round trips per run: {total:.1f} measured (engine {per[0]:.1f}, worker "
              f"{per[1]:.1f}, client {per[2]:.1f}) | spec minimum {MIN_ROUND_TRIPS_PER_RUN} "
              f"({waited} waited on + {PULLS_PER_RUN} pull requests + {OFF_PATH_PER_RUN} off the "
              f"critical path; "
              f"{MIN_ROUND_TRIPS_PER_TOOL_ITERATION} per tool iteration)")  # fmt: skip
        print(f"    {BURST_RUNS} runs at once: {m.rate:.0f} runs/s")
        w = m.writes_per_run
        print(f"    durable writes per tool iteration: {m.writes_per_tool_iteration:.1f} measured "
              f"(worker + engine; derivation {DURABLE_WRITES_PER_TOOL_ITERATION}); per run "
              f"{(w.engine + w.worker + w.client) / WRITES_RUNS:.1f} (derivation "
              f"{DURABLE_WRITES_PER_RUN}: engine "
              f"{w.engine / WRITES_RUNS:.1f}, worker {w.worker / WRITES_RUNS:.1f}, client "
              f"{w.client / WRITES_RUNS:.1f})")  # fmt: skip
        a50, a99 = percentile(alone.times, 50), percentile(alone.times, 99)
        print(f"    each record alone: "
              f"{len(alone.times)} runs: p50 {a50:.1f} ms, p99 {a99:.1f} ms, {a50 / p50:.2f}x the "
              f"headline; {alone.cpu_ms:.1f} ms CPU per run; {alone.rate:.0f} runs/s with "
              f"{BURST_RUNS} at once; {alone.writes_per_tool_iteration:.1f} durable writes "
              f"per tool iteration (derivation "
              f"{ALONE_DURABLE_WRITES_PER_TOOL_ITERATION})")  # fmt: skip
        # The ratio: p50 against the spec's waited round trips, each priced at the floor (a raw
        # JetStream publish on the same connection, measured in this run). 1.0 would mean the
        # run costs nothing but its required round trips.
        ratio = p50 * 1000 / (floor_us * waited)
        print(f"    floor: raw JetStream publish {floor_us:.0f} us on the same connection; "
              f"p50 = {p50 * 1000 / floor_us:.0f} floors for {waited} waited round trips: "
              f"ratio {ratio:.2f}")  # fmt: skip
        figures[f"{key}_floor_us"] = round(floor_us, 1)
        figures[f"{key}_ratio"] = round(ratio, 2)
        figures[f"{key}_p50_ms"] = round(p50, 2)
        figures[f"{key}_p99_ms"] = round(p99, 2)
        figures[f"{key}_cpu_ms_per_run"] = round(m.cpu_ms, 2)
        figures[f"{key}_cpu_floor_us"] = round(cpu_floor_us, 1)
        figures[f"{key}_cpu_floor_ms_per_run"] = round(cpu_floor_us * total / 1000, 2)
        figures[f"{key}_cpu_floor_ratio"] = round(cpu_ratio, 2)
        figures[f"{key}_round_trips_per_run"] = round(total, 1)
        figures[f"{key}_burst_runs_per_s"] = round(m.rate, 1)
        figures[f"{key}_writes_per_tool_iteration"] = round(m.writes_per_tool_iteration, 2)
        figures[f"{key}_writes_per_run"] = round((w.engine + w.worker + w.client) / WRITES_RUNS, 1)
        figures[f"{key}_alone_p50_ms"] = round(a50, 2)
        figures[f"{key}_alone_p99_ms"] = round(a99, 2)
        figures[f"{key}_alone_burst_runs_per_s"] = round(alone.rate, 1)
        figures[f"{key}_alone_writes_per_tool_iteration"] = round(
            alone.writes_per_tool_iteration, 2
        )
    figures["agent_min_round_trips_per_run"] = MIN_ROUND_TRIPS_PER_RUN
    figures["agent_alone_min_round_trips_per_run"] = ALONE_MIN_ROUND_TRIPS_PER_RUN
    print("  peers' published figures (not measured here), same run on this 2-core machine:")
    for name, figure in PEERS:
        print(f"    {name}: {figure}")
    return figures


if __name__ == "__main__":
    run()
