"""``just bench latency`` (issue 12, goal 1): the instrument that times each waited step of a
scripted agent run finds, on a real nats-server, exactly the steps MIN_ROUND_TRIPS_DERIVATION
(bench/agent.py) says wait on the critical path, kind by kind, so the time it sums per kind is
the time of those steps and nothing is left out or counted twice.
"""

from __future__ import annotations

from bench.__main__ import ON_DEMAND, SECTIONS
from bench.agent import (
    ALONE,
    FETCHES_PER_RUN,
    HEADLINE,
    MIN_ROUND_TRIPS_PER_RUN,
    OFF_PATH_PER_RUN,
    PULLS_PER_RUN,
)
from bench.latency import client_start_line, lay_out, open_timed_stack, steps_per_run

#: Sequential runs laid out per script: counts are exact per run, so a few suffice.
RUNS = 3

#: The derivation's waited steps of a run with the records paired, by side and kind (the
#: client's definition read, run index entry and active marker go in one
#: kv_get_and_publish_many, one step of three requests; tests/engine/test_start_path.py checks
#: that they come before the snapshot).
HEADLINE_STEPS = {
    "client kv_get_and_publish_many workflow_defs": 1.0,
    "client kv_create workflow_runs": 1.0,
    "client publish_many task": 1.0,
    "engine fetch WORKFLOW_HISTORY": 4.0,
    "engine kv_update workflow_runs": 4.0,
    "engine publish task": 3.0,
    "worker fetch TASK_QUEUES": 4.0,
    "worker publish journal": 11.0,
    "worker publish history": 4.0,
}


def _waited(counts: dict[str, float]) -> float:
    # Steps, not requests: the definition read and the index pair are one step
    # (kv_get_and_publish_many).
    return sum(n for key, n in counts.items() if " fetch " not in key)


async def test_the_instrument_times_the_derivations_steps() -> None:
    async with open_timed_stack(sync_always=False) as (stack, steps):
        headline_layouts = await lay_out(stack, steps, HEADLINE.workflow, RUNS)
        headline = steps_per_run(headline_layouts)
        alone = steps_per_run(await lay_out(stack, steps, ALONE.workflow, RUNS))
    print(f"steps per run: headline {headline}; each record alone {alone}")
    # The rare idle poll of the worker's liveness key is not a step of the run.
    headline.pop("worker kv_put worker_polls", None)
    alone.pop("worker kv_put worker_polls", None)
    assert headline == HEADLINE_STEPS
    # The client's start: the definition read beside the index pair, then the snapshot, then
    # the first task with workflow.started (tests/engine/test_start_path.py).
    start_line = client_start_line(headline_layouts)
    print(start_line)
    assert start_line.endswith("requests waited in a row p50 3")
    assert _waited(headline) == MIN_ROUND_TRIPS_PER_RUN - PULLS_PER_RUN - OFF_PATH_PER_RUN == 25
    # A fetch per event and per task, none with a pull request of its own (the engine's feeds
    # keep one waiting, the worker's acks carry the next).
    assert sum(n for key, n in headline.items() if " fetch " in key) == FETCHES_PER_RUN == 8
    # Each record alone: the same steps but 7 more journal publishes (2 per tool iteration,
    # 1 for the answer), 32 waited.
    assert alone == {**HEADLINE_STEPS, "worker publish journal": 18.0}
    assert _waited(alone) == 32


def test_latency_is_a_section_run_on_demand() -> None:
    assert "latency" in ON_DEMAND and "latency" not in SECTIONS
