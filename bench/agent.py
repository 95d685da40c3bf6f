"""The scripted agent of the crash matrix, crash-free, on a real server (issue 4).

Four iterations: model + safe tool, model + unsafe tool, model + safe tool, model + answer
(4 model calls, 3 tool calls). Sequential runs for ``SEQUENTIAL_S`` seconds give p50/p99 ms per
run and round trips per run; then ``BURST_RUNS`` runs started at once give runs per second.
Both durability settings are measured; see ``MIN_ROUND_TRIPS_DERIVATION`` for the floor the spec
sets. The measured count also holds the idle polls of the engine's timer loop and of the pull
loops (about one a second each), so it sits a fraction above the floor.
"""

from __future__ import annotations

import time

import attrs
import trio

from dagnats_trio.testing import (
    AGENT_TASK,
    DEFAULT_SCRIPT,
    ScriptedAgent,
    agent_workflow,
    expected_answer,
)

from ._stack import Counts, Stack, open_stack, percentile

AGENT_WORKFLOW = "bench-agent"
SEQUENTIAL_S = 10.0
SEQUENTIAL_S_QUICK = 2.0
WARMUP_RUNS = 5
BURST_RUNS = 50

#: What the spec requires, and which of it must wait on the critical path.
MIN_ROUND_TRIPS_DERIVATION = """
A round trip is a request that waits for the server's answer, as the transport counts it. A
durable write is one that the server stores (and, with sync_interval always, fsyncs) before it
answers: a publish, an atomic batch of publishes (stored whole or not at all, fsynced once), a
KV write. Acks are neither (sent without waiting).

Per tool iteration of a journal step (model call + tool call), the scripted agent pairing its
records (Journal.model(fn, then_tool=...), Journal.tool(..., then_continue=...)):
 worker  pull request       counted, but left waiting before the task is stored, so the task
                            arrives with no request on the critical path.
         tail read          required: "reads the journal tail from the stream leader" (the Stale
                            check, and the sequence the claim is fenced on). In the fast path the
                            tail IS the previous commit, so it is also the state read by
                            journal_seq: one get, not two.
         claim              WRITE 1. Required: Journal() appends it before it returns; it fences
                            every earlier claim and counts toward the restart limit, so it cannot
                            wait for a later record.
         model tail read    required: "reads the tail first, so a holder that is already fenced
                            does not spend a model call". It cannot overlap the call (that would
                            spend it) nor the claim (a read racing the claim says nothing about
                            what came after the claim).
         model record       WRITE 2: one atomic batch, fenced on the claim's sequence. The intent
         + tool intent      follows from the response by a plain function the journal calls
                            (then_tool), so no handler code runs between the two records: a crash
                            before the batch is stored leaves neither (the model is asked again,
                            as after a crash before the response was recorded), after it both.
                            The intent is stored before the tool starts, as the spec requires.
         tool result        WRITE 3: one atomic batch, fenced on the intent's sequence. The
         + commit           state of record follows from the result by a plain function
                            (then_continue), so again no handler code runs between them: before
                            the batch, the intent is open (an unsafe tool is answered
                            interrupted, never started twice); after it, the iteration is done.
                            The commit is stored before the event, as the spec requires.
         lifecycle event    WRITE 4: required, on the history stream (a batch holds one stream's
                            records, so it cannot ride the journal's batch); it carries the
                            commit's sequence, so it also waits for the commit.
         task ack           NOT a round trip: sent without waiting (ack_nowait) once the event is
                            stored; a lost ack is a redelivery that the journal answers with
                            Committed and the stream's msg id / the engine's acceptance rule drop.
 engine  pull request       counted, left waiting, as for the worker.
         snapshot CAS       WRITE 5: the dispatch is saved before the task is published (the KV
                            bucket is a stream of its own: no batch with the task).
         task publish       WRITE 6: stored before the event is acked (else a crash after the
                            ack would lose the dispatch).
         event ack          NOT a round trip: ack_nowait after the task is stored; a lost ack is
                            a redelivery that the snapshot's outbox replays idempotently.
 => 6 durable writes per tool iteration (was 8: model record, tool intent, tool result and commit
    were 4 writes, now 2 batches); 10 round trips counted (8 waited on + 2 pull requests; was 12).
    An answer iteration has no intent, result or next task: worker 7 round trips (pull, tail,
    claim, model tail read, model record, commit, event: 4 writes), engine 2 (CAS + pull).

What the other two writes would take (not done, and why): the claim cannot be deferred into the
first batch (Journal() must append it before returning, and the restart limit counts claims that
crashed before writing anything else); the lifecycle event and the engine's CAS and task publish
live on three other streams, and the spec has the worker publish the event after the commit and
the engine save each dispatch before publishing its task, so a fifth write would have to come
from the engine handling a journal step's continue without its full round (a protocol change the
spec does not describe).

Per run (3 tool iterations, 1 answer iteration):
 client  definition read + run index entry and active               5  (the definition may be
         marker (two publishes at once: one waited) +                  re-registered at any time:
         snapshot create + workflow.started                            reading it is the only
                                                                       way to start the current)
 engine  workflow.started: pull + snapshot read + CAS + task        4  (the read: the engine does
                                                                       not know the revision the
                                                                       service created)
 worker  3 x 7 (tool iterations) + 7 (answer)                       28
 engine  3 x step.continue (pull + CAS + task) + step.completed     12
         (pull + CAS + active marker purge, after the finished
         snapshot is saved: off the critical path)
 => 49 counted, of which 9 are pull requests left waiting and 2 overlap or follow the run's end
    (the second index publish, the marker purge): 38 on the critical path.
"""
#: Requests counted per run at the floor of MIN_ROUND_TRIPS_DERIVATION.
MIN_ROUND_TRIPS_PER_RUN = 5 + 4 + (3 * 7 + 7) + (3 * 3 + 3)
#: Of those, the pull requests (one per delivery), left waiting before their message arrives.
PULLS_PER_RUN = 5 + 4
#: And those not waited on: the index publish beside the other, the purge after the run's end.
OFF_PATH_PER_RUN = 2
#: Per tool iteration: worker 6 waited on + 1 pull, engine 2 waited on + 1 pull.
MIN_ROUND_TRIPS_PER_TOOL_ITERATION = 10
#: Durable writes per tool iteration (worker: claim, model + intent batch, result + commit batch,
#: lifecycle event; engine: snapshot CAS, task publish); issue 12 counted 8 before the batches.
DURABLE_WRITES_PER_TOOL_ITERATION = 6
#: Writes per tool iteration are measured, not derived: runs of the script, and of a script
#: with its tool turns twice (``LONG_SCRIPT``), each this many times; the difference in durable
#: writes per run over the difference in tool iterations is what one tool iteration costs.
WRITES_RUNS = 5
LONG_AGENT_TASK = "bench-agent-long"
LONG_AGENT_WORKFLOW = "bench-agent-long"
LONG_SCRIPT = (*DEFAULT_SCRIPT[:-1], *DEFAULT_SCRIPT[:-1], DEFAULT_SCRIPT[-1])
#: The same script with each record written alone (no ``then_tool`` / ``then_continue``): what a
#: handler that does not pair its records costs. Printed beside the paired figure because an
#: atomic batch has a fixed cost on a file stream (``just bench batch``) that can outweigh the
#: writes it saves.
UNPAIRED_AGENT_TASK = "bench-agent-unpaired"
UNPAIRED_AGENT_WORKFLOW = "bench-agent-unpaired"

#: Peers' published figures on this 2-core machine, same 4-model-call, 3-tool-call run.
PEERS = (
    ("LangGraph in-process + SQLite checkpointer", "8.5 ms p50"),
    ("Restate", "13.0 ms p50, 142 runs/s with 50 at once"),
    ("DBOS", "17-25 ms"),
)


async def _sequential(
    stack: Stack, seconds: float, workflow: str = AGENT_WORKFLOW
) -> tuple[list[float], Counts, float]:
    answer = expected_answer()
    for _ in range(WARMUP_RUNS):
        await stack.run(workflow, {"task": "deploy"})
    times: list[float] = []
    before = stack.counts()
    cpu_before = time.process_time()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        start = time.perf_counter()
        snap = await stack.run(workflow, {"task": "deploy"})
        times.append((time.perf_counter() - start) * 1000)
        outputs = snap.outputs()
        if outputs.get("agent") != answer:
            raise RuntimeError(f"wrong answer {outputs!r} (status {snap.status.value})")
    cpu_ms_per_run = (time.process_time() - cpu_before) * 1000 / max(1, len(times))
    return times, stack.counts() - before, cpu_ms_per_run


async def _writes_per_tool_iteration(stack: Stack) -> tuple[float, Counts]:
    """Durable writes one tool iteration costs (worker + engine), measured as the difference
    between the long and the default script; and the default script's writes per run."""
    per_run: list[Counts] = []
    for workflow, script in ((AGENT_WORKFLOW, DEFAULT_SCRIPT), (LONG_AGENT_WORKFLOW, LONG_SCRIPT)):
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


async def _burst(stack: Stack) -> float:
    answer = expected_answer()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:

        async def one() -> None:
            snap = await stack.run(AGENT_WORKFLOW, {"task": "deploy"})
            if snap.outputs().get("agent") != answer:
                raise RuntimeError(f"wrong answer {snap.outputs()!r}")

        for _ in range(BURST_RUNS):
            nursery.start_soon(one)
    return BURST_RUNS / (time.perf_counter() - start)


@attrs.frozen
class _Measured:
    times: list[float]
    counts: Counts
    cpu_ms: float
    unpaired_times: list[float]
    unpaired_cpu_ms: float
    rate: float
    floor_us: float
    writes_per_tool_iteration: float
    writes_per_run: Counts


async def _measure(sync_always: bool, seconds: float) -> _Measured:
    agent = ScriptedAgent()
    long_agent = ScriptedAgent(LONG_SCRIPT, task=LONG_AGENT_TASK)
    unpaired = ScriptedAgent(task=UNPAIRED_AGENT_TASK, paired=False)
    async with open_stack(
        sync_always=sync_always,
        handlers={
            AGENT_TASK: agent.turn,
            LONG_AGENT_TASK: long_agent.turn,
            UNPAIRED_AGENT_TASK: unpaired.turn,
        },
        workflows=[
            agent_workflow(AGENT_WORKFLOW),
            agent_workflow(LONG_AGENT_WORKFLOW, task=LONG_AGENT_TASK),
            agent_workflow(UNPAIRED_AGENT_WORKFLOW, task=UNPAIRED_AGENT_TASK),
        ],
    ) as stack:
        floor_us = await stack.publish_floor_us()
        times, counts, cpu_ms = await _sequential(stack, seconds)
        u_times, _, u_cpu_ms = await _sequential(stack, seconds, UNPAIRED_AGENT_WORKFLOW)
        rate = await _burst(stack)
        per_tool, per_run = await _writes_per_tool_iteration(stack)
        return _Measured(
            times, counts, cpu_ms, u_times, u_cpu_ms, rate, floor_us, per_tool, per_run
        )


def run(*, quick: bool = False) -> dict[str, float]:
    seconds = SEQUENTIAL_S_QUICK if quick else SEQUENTIAL_S
    print(f"== agent: scripted agent (4 model calls, 3 tool calls), crash-free; sequential "
          f"for {seconds:.0f} s, then {BURST_RUNS} runs at once")  # fmt: skip
    figures: dict[str, float] = {}
    for sync_always, label, key in (
        (True, "single node, sync_interval always", "agent_fsync"),
        (False, "sync_interval default (a cluster relies on replicas)", "agent"),
    ):
        m = trio.run(_measure, sync_always, seconds)
        times, counts, cpu_ms, rate, floor_us = m.times, m.counts, m.cpu_ms, m.rate, m.floor_us
        n = len(times)
        p50, p99 = percentile(times, 50), percentile(times, 99)
        per = (counts.engine / n, counts.worker / n, counts.client / n)
        total = sum(per)
        print(f"  {label}:")
        print(f"    {n} sequential runs: p50 {p50:.1f} ms, p99 {p99:.1f} ms per run; "
              f"{cpu_ms:.1f} ms of this process's CPU per run")  # fmt: skip
        waited = MIN_ROUND_TRIPS_PER_RUN - PULLS_PER_RUN - OFF_PATH_PER_RUN
        print(f"    round trips per run: {total:.1f} measured (engine {per[0]:.1f}, worker "
              f"{per[1]:.1f}, client {per[2]:.1f}) | spec minimum {MIN_ROUND_TRIPS_PER_RUN} "
              f"({waited} waited on + {PULLS_PER_RUN} pull requests + {OFF_PATH_PER_RUN} off the "
              f"critical path; "
              f"{MIN_ROUND_TRIPS_PER_TOOL_ITERATION} per tool iteration)")  # fmt: skip
        u50, u99 = percentile(m.unpaired_times, 50), percentile(m.unpaired_times, 99)
        print(f"    unpaired (each record written alone, 8 writes per tool iteration): "
              f"{len(m.unpaired_times)} runs: p50 {u50:.1f} ms, p99 {u99:.1f} ms; "
              f"{m.unpaired_cpu_ms:.1f} ms CPU per run")  # fmt: skip
        print(f"    {BURST_RUNS} runs at once: {rate:.0f} runs/s")
        w = m.writes_per_run
        print(f"    durable writes per tool iteration: {m.writes_per_tool_iteration:.1f} measured "
              f"(worker + engine; derivation {DURABLE_WRITES_PER_TOOL_ITERATION}, issue 12 "
              f"started at 8); per run {(w.engine + w.worker + w.client) / WRITES_RUNS:.1f} "
              f"(engine {w.engine / WRITES_RUNS:.1f}, worker {w.worker / WRITES_RUNS:.1f}, "
              f"client {w.client / WRITES_RUNS:.1f})")  # fmt: skip
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
        figures[f"{key}_cpu_ms_per_run"] = round(cpu_ms, 2)
        figures[f"{key}_round_trips_per_run"] = round(total, 1)
        figures[f"{key}_unpaired_p50_ms"] = round(u50, 2)
        figures[f"{key}_unpaired_p99_ms"] = round(u99, 2)
        figures[f"{key}_burst_runs_per_s"] = round(rate, 1)
        figures[f"{key}_writes_per_tool_iteration"] = round(m.writes_per_tool_iteration, 2)
    figures["agent_min_round_trips_per_run"] = MIN_ROUND_TRIPS_PER_RUN
    print("  peers' published figures (not measured here), same run on this 2-core machine:")
    for name, figure in PEERS:
        print(f"    {name}: {figure}")
    return figures


if __name__ == "__main__":
    run()
