"""``just bench latency`` cuts a run's gap (the time no waited step covers: this process's CPU
and scheduling between an answer and the next request) by transition, the step that ended
before it and the step that began after it, and charges each gap to the tasks that ran in it.

The cut is exact (the gaps of a run sum to its wall time less the time its steps cover, steps
clipped to the run, overlaps counted once) on hand-made layouts; on a real nats-server the
headline script's gaps fall in the transitions its steps allow, each where the derivation puts
it (the model call and the tool between two appends: 7 per run, named by the records of each),
and the instrument
finds the worker's delivery task in them.
"""

from __future__ import annotations

import itertools

import pytest

from bench.agent import HEADLINE
from bench.latency import (
    NO_TASK,
    RUN_SEEN,
    RUN_START,
    RunLayout,
    Step,
    covered_s,
    gaps_by_transition,
    lay_out,
    open_timed_stack,
    tasks_in_gaps,
)
from dagnats_trio.protocol.layout import WORKER_POLLS_BUCKET

#: Sequential runs laid out on the server: the transitions are counted per run, so a few do.
RUNS = 3
#: The headline script's appends that follow another with the handler's own work between them,
#: per run, named by the records each stores: after each claim the model call (a tool call's
#: response with its intent, 3; the answer with its complete commit, 1), after each response
#: and intent the tool (its result with the continue commit, 3).
JOURNAL_TO_JOURNAL = {
    "worker publish journal [claim] -> worker publish journal [model+tool.intent]": 3,
    "worker publish journal [claim] -> worker publish journal [model+commit]": 1,
    "worker publish journal [model+tool.intent] -> worker publish journal [tool.result+commit]": 3,
}
#: The bucket of the worker's poll marks (``worker._polls``).
POLLS = WORKER_POLLS_BUCKET


def _names(layout: RunLayout) -> list[str]:
    return [gap.transition for gap in gaps_by_transition(layout)]


def test_gaps_are_the_uncovered_time_named_by_their_transition() -> None:
    steps = (
        Step("client", "kv_get defs", 1.0, 2.0),
        # Overlapping writes: covered once; the one that ends last names the next gap.
        Step("client", "publish a", 3.0, 5.0),
        Step("client", "publish b", 3.5, 4.5),
        # A fetch waits from before the run: it begins at the last write before its return.
        Step("engine", "fetch H", -5.0, 6.0),
        Step("engine", "kv_update R", 7.0, 9.0),
    )
    layout = RunLayout(0.0, 10.0, steps)
    gaps = [(g.transition, g.start, g.end) for g in gaps_by_transition(layout)]
    assert gaps == [
        (f"{RUN_START} -> client kv_get defs", 0.0, 1.0),
        ("client kv_get defs -> client publish a", 2.0, 3.0),
        # publish a ended at 5.0 and the fetch's delivery began there: no gap between them.
        ("engine fetch H -> engine kv_update R", 6.0, 7.0),
        (f"engine kv_update R -> {RUN_SEEN}", 9.0, 10.0),
    ]
    assert covered_s(layout) == pytest.approx(6.0)  # 1-2, 3-5, 5-6, 7-9


def test_steps_outside_the_run_are_clipped_and_a_run_without_steps_is_all_gap() -> None:
    # A step that ends after the client saw the run finished (the worker's last event
    # publish, whose ack it may read late) covers only up to the run's end.
    late = RunLayout(0.0, 4.0, (Step("worker", "publish history", 1.0, 6.0),))
    assert [(g.transition, g.seconds) for g in gaps_by_transition(late)] == [
        (f"{RUN_START} -> worker publish history", 1.0)
    ]
    assert covered_s(late) == pytest.approx(3.0)
    empty = RunLayout(5.0, 2.0, ())
    assert [(g.transition, g.seconds) for g in gaps_by_transition(empty)] == [
        (f"{RUN_START} -> {RUN_SEEN}", 2.0)
    ]
    assert covered_s(empty) == 0.0


async def test_a_real_runs_gaps_sum_to_its_uncovered_time_by_the_derivations_transitions() -> None:
    async with open_timed_stack(sync_always=False) as (stack, steps):
        # The worker's poll marks (a write every 5 s, not a step of any run) are left out.
        layouts = [
            RunLayout(lay.start, lay.wall, tuple(s for s in lay.steps if POLLS not in s.kind))
            for lay in await lay_out(stack, steps, HEADLINE.workflow, RUNS)
        ]
        by_task = await tasks_in_gaps(stack, steps, HEADLINE.workflow, RUNS)
    for layout in layouts:
        gaps = gaps_by_transition(layout)
        print(f"run wall {layout.wall * 1e3:.2f} ms, covered {covered_s(layout) * 1e3:.2f} ms: "
              + ", ".join(f"{g.transition} {g.seconds * 1e6:.0f} us" for g in gaps))  # fmt: skip
        # Exact: the gaps and the covered time make the wall time, every gap is positive and
        # the gaps follow one another.
        assert sum(g.seconds for g in gaps) + covered_s(layout) == pytest.approx(layout.wall)
        assert all(g.seconds > 0 for g in gaps)
        assert all(a.end <= b.start for a, b in itertools.pairwise(gaps))
        assert 0 < covered_s(layout) < layout.wall
        names = _names(layout)
        assert names[0].startswith(f"{RUN_START} -> client ")
        # The time after the last step is the client's to see the run finished (unless a
        # step's answer, the worker's last event publish's, was read only after that).
        assert not any(n.endswith(f" -> {RUN_SEEN}") for n in names[:-1])
        if gaps[-1].end == layout.start + layout.wall:
            assert names[-1].endswith(f" -> {RUN_SEEN}")
        # Between two appends the handler's work (the model call, the tool) always leaves a
        # gap, named by the records of the append before and after, as the derivation has them;
        # and only there is an append followed by another.
        assert {n: names.count(n) for n in JOURNAL_TO_JOURNAL} == JOURNAL_TO_JOURNAL
        appends = [n for n in names if n.count("worker publish journal") == 2]
        assert len(appends) == sum(JOURNAL_TO_JOURNAL.values())
        # No transition names a step the run does not make (the run end's purges are off the
        # path, and left out of the layout).
        assert not any("purge" in name for name in names)
    print({name: {t: round(s * 1e6) for t, s in tasks.items()} for name, tasks in by_task.items()})
    # The worker's delivery task ran in the gaps between appends: its own CPU.
    journal_tasks = by_task[next(iter(JOURNAL_TO_JOURNAL))]
    assert journal_tasks["worker._worker.Worker._deliver"] > 0
    assert max(journal_tasks, key=lambda t: journal_tasks[t]) == "worker._worker.Worker._deliver"
    assert NO_TASK in journal_tasks
