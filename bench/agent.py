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

The headline is the scripted agent writing each record alone (no then_tool / then_continue),
because that is the faster configuration on the streams measured here: single-replica file
streams. On them nats-server (2.15.1, newBatchStore in server/jetstream_batching.go) stages
every atomic batch in a file store of its own, created for the batch and deleted at its commit:
per batch of 2, 3 mkdir, 18 open, 3 rename, 12 unlink, 12 getdents and 2 fsyncs more than two
publishes (strace -c), ~2.3 ms on an idle machine whatever sync_interval says, with nats-py as
with the native client; a publish costs 0.07 ms (0.34 ms with fsync). A replicated stream or a
memory stream stages in memory (0.1 ms). So a batch that saves one publish costs several, and
the paired agent (6 writes per tool iteration) is printed beside the headline, not as it.

Per tool iteration of a journal step (model call + tool call), each record written alone:
 worker  pull request       counted, but left waiting before the task is stored, so the task
                            arrives with no request on the critical path.
         tail read          required: "reads the journal tail from the stream leader" (the Stale
                            check, and the sequence the claim is fenced on). In the fast path the
                            tail IS the previous commit, so it is also the state read by
                            journal_seq: one get, not two.
         claim              WRITE 1. Required: Journal() appends it before it returns; it fences
                            every earlier claim and counts toward the restart limit, so it cannot
                            wait for a later record.
         model tail read    NOT a round trip: the spec's "reads the tail first, so a holder that
                            is already fenced does not spend a model call" is answered by the
                            claim's ack. A fenced append is stored only on the tail, so its ack
                            proves this holder held the tail as a read's answer does; one that
                            arrived less than TAIL_PROOF_FRESH_S (20 ms) ago, to a holder still
                            writable with its lease, stands for the read (journal/_fencing.py
                            argues the bound against the AckWait and heartbeat). The model call
                            follows the claim at once, so the read is made only after a stall.
         model record       WRITE 2, fenced on the claim's sequence: the response is durable
                            before anything acts on it.
         tool intent        WRITE 3, fenced on the model record's sequence (the server cannot
                            check a sequence it has not assigned yet, so the two cannot be sent
                            together and stay fenced, except as one atomic batch): stored before
                            the tool starts, as the spec requires.
         tool result        WRITE 4, fenced on the intent's sequence.
         commit             WRITE 5, fenced on the result's sequence; stored before the event,
                            as the spec requires.
         lifecycle event    WRITE 6: required, on the history stream; it carries the commit's
                            sequence, so it also waits for the commit.
         task ack           NOT a round trip: sent without waiting (ack_nowait) once the event is
                            stored; a lost ack is a redelivery that the journal answers with
                            Committed and the stream's msg id / the engine's acceptance rule drop.
 engine  pull request       counted, left waiting, as for the worker.
         snapshot CAS       WRITE 7: the dispatch is saved before the task is published (the KV
                            bucket is a stream of its own: no batch with the task).
         task publish       WRITE 8: stored before the event is acked (else a crash after the
                            ack would lose the dispatch).
         event ack          NOT a round trip: ack_nowait after the task is stored; a lost ack is
                            a redelivery that the snapshot's outbox replays idempotently.
 => 8 durable writes per tool iteration; 11 round trips counted (9 waited on + 2 pull
    requests). An answer iteration has no intent, result or next task: worker 6 round trips
    (pull, tail, claim, model record, commit, event: 4 writes), engine 2 (CAS + pull).

Paired (printed beside): model record + tool intent is one atomic batch, fenced on the claim's
sequence, and tool result + commit another, fenced on the intent's: 6 durable writes and 9
round trips per tool iteration, 44 round trips per run, 33 on the critical path; each batch
pays the staging above, so it is slower here; where a batch stages in memory it is not (a
memory stream, `just bench batch`; a 3-replica stream: a batch of 2 in 0.42 ms against 0.69 ms
for two publishes, docs/jetstream.md).

Five writes or fewer at the cost of single publishes needs what a batch gives without the
server's staging: one message holding the two records of a pair (atomic because it is one
message, fenced once), which every journal reader (replay view, journal check, REST journal,
timeline) would have to expand. Not done; see docs/jetstream.md, "Cost".

Per run (3 tool iterations, 1 answer iteration), each record written alone:
 client  definition read + run index entry and active               5  (the definition may be
         marker (two publishes at once: one waited) +                  re-registered at any time:
         snapshot create + workflow.started                            reading it is the only
                                                                       way to start the current)
 engine  workflow.started: pull + CAS + task                        3  (no snapshot read: the
                                                                       event names the revision
                                                                       the service created and
                                                                       the definition's; the
                                                                       engine derives the same
                                                                       snapshot, engine._store.
                                                                       started_with; a CAS on a
                                                                       run that moved on fails
                                                                       and reads, as before)
 worker  3 x 8 (tool iterations) + 6 (answer)                       30
 engine  3 x step.continue (pull + CAS + task) + step.completed     12
         (pull + CAS + active marker purge, after the finished
         snapshot is saved: off the critical path)
 => 50 counted, of which 9 are pull requests left waiting and 2 overlap or follow the run's end
    (the second index publish, the marker purge): 39 on the critical path. (Before the claim's
    ack stood for the model's tail read: 55 and 44, one read per model call; before the start
    named its snapshot's revision: 51 and 40, the engine's snapshot read.)
"""
#: Requests counted per run at the floor of MIN_ROUND_TRIPS_DERIVATION (each record alone).
MIN_ROUND_TRIPS_PER_RUN = 5 + 3 + (3 * 8 + 6) + (3 * 3 + 3)
#: The same for the paired script: two fewer worker writes per tool iteration.
PAIRED_MIN_ROUND_TRIPS_PER_RUN = MIN_ROUND_TRIPS_PER_RUN - 3 * 2
#: Of those, the pull requests (one per delivery), left waiting before their message arrives.
PULLS_PER_RUN = 5 + 4
#: And those not waited on: the index publish beside the other, the purge after the run's end.
OFF_PATH_PER_RUN = 2
#: Per tool iteration: worker 7 waited on + 1 pull, engine 2 waited on + 1 pull.
MIN_ROUND_TRIPS_PER_TOOL_ITERATION = 11
#: Durable writes per tool iteration, each record alone (worker: claim, model record, intent,
#: result, commit, lifecycle event; engine: snapshot CAS, task publish).
DURABLE_WRITES_PER_TOOL_ITERATION = 8
#: The same paired (model + intent and result + commit as two atomic batches).
PAIRED_DURABLE_WRITES_PER_TOOL_ITERATION = 6
#: Writes per tool iteration are measured, not derived: runs of the script, and of a script
#: with its tool turns twice (``LONG_SCRIPT``), each this many times; the difference in durable
#: writes per run over the difference in tool iterations is what one tool iteration costs.
WRITES_RUNS = 5
LONG_SCRIPT = (*DEFAULT_SCRIPT[:-1], *DEFAULT_SCRIPT[:-1], DEFAULT_SCRIPT[-1])
#: The headline: each record written alone (the faster on single-replica file streams).
HEADLINE = _Variant(AGENT_TASK, "bench-agent", "bench-agent-long", paired=False)
#: Beside it: the records paired as atomic batches (``then_tool`` / ``then_continue``), fewer
#: durable writes at the cost of the server's staging of each batch.
PAIRED = _Variant(
    "bench-agent-paired", "bench-agent-paired", "bench-agent-paired-long", paired=True
)

#: Peers' published figures on this 2-core machine, same 4-model-call, 3-tool-call run.
PEERS = (
    ("LangGraph in-process + SQLite checkpointer", "8.5 ms p50"),
    ("Restate", "13.0 ms p50, 142 runs/s with 50 at once"),
    ("DBOS", "17-25 ms"),
)


async def _sequential(
    stack: Stack, seconds: float, workflow: str
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


async def _writes_per_tool_iteration(stack: Stack, variant: _Variant) -> tuple[float, Counts]:
    """Durable writes one tool iteration costs (worker + engine), measured as the difference
    between the long and the default script; and the default script's writes per run."""
    per_run: list[Counts] = []
    for workflow, script in (
        (variant.workflow, DEFAULT_SCRIPT),
        (variant.long_workflow, LONG_SCRIPT),
    ):
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


async def _burst(stack: Stack, workflow: str) -> float:
    answer = expected_answer()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:

        async def one() -> None:
            snap = await stack.run(workflow, {"task": "deploy"})
            if snap.outputs().get("agent") != answer:
                raise RuntimeError(f"wrong answer {snap.outputs()!r}")

        for _ in range(BURST_RUNS):
            nursery.start_soon(one)
    return BURST_RUNS / (time.perf_counter() - start)


@attrs.frozen
class _Figures:
    """One variant's figures in one run."""

    times: list[float]
    counts: Counts
    cpu_ms: float
    rate: float
    writes_per_tool_iteration: float
    writes_per_run: Counts


async def _figures(stack: Stack, variant: _Variant, seconds: float) -> _Figures:
    times, counts, cpu_ms = await _sequential(stack, seconds, variant.workflow)
    rate = await _burst(stack, variant.workflow)
    per_tool, per_run = await _writes_per_tool_iteration(stack, variant)
    return _Figures(times, counts, cpu_ms, rate, per_tool, per_run)


async def _measure(sync_always: bool, seconds: float) -> tuple[float, _Figures, _Figures]:
    """The publish floor, then the headline's figures and the paired script's, on one stack."""
    handlers: dict[str, Handler] = {}
    workflows: list[dict[str, Any]] = []
    for v in (HEADLINE, PAIRED):
        short, long = v.agents()
        handlers |= {v.task: short.turn, v.long_task: long.turn}
        workflows += [
            agent_workflow(v.workflow, task=v.task),
            agent_workflow(v.long_workflow, task=v.long_task),
        ]
    async with open_stack(sync_always=sync_always, handlers=handlers, workflows=workflows) as stack:
        floor_us = await stack.publish_floor_us()
        headline = await _figures(stack, HEADLINE, seconds)
        paired = await _figures(stack, PAIRED, seconds)
        return floor_us, headline, paired


def run(*, quick: bool = False) -> dict[str, float]:
    seconds = SEQUENTIAL_S_QUICK if quick else SEQUENTIAL_S
    print(f"== agent: scripted agent (4 model calls, 3 tool calls), crash-free, each record "
          f"written alone (the paired script beside it); sequential for {seconds:.0f} s, then "
          f"{BURST_RUNS} runs at once")  # fmt: skip
    figures: dict[str, float] = {}
    for sync_always, label, key in (
        (True, "single node, sync_interval always", "agent_fsync"),
        (False, "sync_interval default (a cluster relies on replicas)", "agent"),
    ):
        floor_us, m, paired = trio.run(_measure, sync_always, seconds)
        n = len(m.times)
        p50, p99 = percentile(m.times, 50), percentile(m.times, 99)
        per = (m.counts.engine / n, m.counts.worker / n, m.counts.client / n)
        total = sum(per)
        print(f"  {label}:")
        print(f"    {n} sequential runs: p50 {p50:.1f} ms, p99 {p99:.1f} ms per run; "
              f"{m.cpu_ms:.1f} ms of this process's CPU per run")  # fmt: skip
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
              f"{(w.engine + w.worker + w.client) / WRITES_RUNS:.1f} (engine "
              f"{w.engine / WRITES_RUNS:.1f}, worker {w.worker / WRITES_RUNS:.1f}, client "
              f"{w.client / WRITES_RUNS:.1f})")  # fmt: skip
        a50, a99 = percentile(paired.times, 50), percentile(paired.times, 99)
        print(f"    paired (model + intent, result + commit as atomic batches): "
              f"{len(paired.times)} runs: p50 {a50:.1f} ms, p99 {a99:.1f} ms, {a50 / p50:.2f}x the "
              f"headline; {paired.cpu_ms:.1f} ms CPU per run; {paired.rate:.0f} runs/s with "
              f"{BURST_RUNS} at once; {paired.writes_per_tool_iteration:.1f} durable writes "
              f"per tool iteration (derivation "
              f"{PAIRED_DURABLE_WRITES_PER_TOOL_ITERATION})")  # fmt: skip
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
        figures[f"{key}_round_trips_per_run"] = round(total, 1)
        figures[f"{key}_burst_runs_per_s"] = round(m.rate, 1)
        figures[f"{key}_writes_per_tool_iteration"] = round(m.writes_per_tool_iteration, 2)
        figures[f"{key}_paired_p50_ms"] = round(a50, 2)
        figures[f"{key}_paired_p99_ms"] = round(a99, 2)
        figures[f"{key}_paired_burst_runs_per_s"] = round(paired.rate, 1)
        figures[f"{key}_paired_writes_per_tool_iteration"] = round(
            paired.writes_per_tool_iteration, 2
        )
    figures["agent_min_round_trips_per_run"] = MIN_ROUND_TRIPS_PER_RUN
    figures["agent_paired_min_round_trips_per_run"] = PAIRED_MIN_ROUND_TRIPS_PER_RUN
    print("  peers' published figures (not measured here), same run on this 2-core machine:")
    for name, figure in PEERS:
        print(f"    {name}: {figure}")
    return figures


if __name__ == "__main__":
    run()
