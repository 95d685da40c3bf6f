"""An agent loop with a no-op handler: the engine's per-iteration cost, no journal.

Each iteration is one task out, one ``step.continue`` in: the engine's critical path is event in,
snapshot compare-and-set, task out (issue 3). Figures are per iteration, averaged over one run of
``LOOP_ITERATIONS`` iterations (best of ``LOOP_ROUNDS`` runs, since the machine is shared), with
the engine's and the worker's round trips counted by their own transports. The run's start and
end and the idle polls of the timer loop are spread over the iterations, so the counts sit a
little above the floor.
"""

from __future__ import annotations

import time
from typing import Any

import trio

from dagnats_trio.worker import TaskContext

from ._stack import Counts, open_stack

LOOP_TASK = "bench-noop"
LOOP_WORKFLOW = "bench-loop"
LOOP_ITERATIONS = 200
LOOP_ITERATIONS_QUICK = 50
LOOP_ROUNDS = 3
#: The floor per iteration: worker pull + step.continue publish (stored before the ack, which is
#: sent without waiting); engine pull + snapshot CAS + task publish (stored before the event's
#: ack, also not waited for). The two pull requests are left waiting before their message is
#: stored, so 3 requests are on the critical path.
MIN_WORKER_PER_ITERATION = 2
MIN_ENGINE_PER_ITERATION = 3
#: Of those, the pull requests (worker's and engine's), already waiting before their message.
PULLS_PER_ITERATION = 2


async def _noop(tc: TaskContext) -> None:
    iterations: int = tc.input["iterations"]
    if tc.iteration + 1 >= iterations:
        await tc.complete({"iterations": tc.iteration + 1})
    else:
        await tc.continue_()


def _workflow(iterations: int) -> dict[str, Any]:
    return {
        "name": LOOP_WORKFLOW,
        "version": 1,
        "steps": [
            {
                "id": "loop",
                "task": LOOP_TASK,
                "type": "agent_loop",
                "agent_loop": {"max_iterations": iterations + 1},
            }
        ],
    }


async def _measure(sync_always: bool, iterations: int) -> tuple[float, Counts, float]:
    async with open_stack(
        sync_always=sync_always, handlers={LOOP_TASK: _noop}, workflows=[_workflow(iterations)]
    ) as stack:
        await stack.run(LOOP_WORKFLOW, {"iterations": 3})  # warm up every path
        floor_us = await stack.publish_floor_us()
        best_ms = float("inf")
        best_counts = Counts(0, 0, 0)
        for _ in range(LOOP_ROUNDS):
            before = stack.counts()
            start = time.perf_counter()
            snap = await stack.run(LOOP_WORKFLOW, {"iterations": iterations})
            ms = (time.perf_counter() - start) * 1000 / iterations
            if snap.status.value != "completed":
                raise RuntimeError(f"loop run ended {snap.status.value}: {snap.error}")
            if ms < best_ms:
                best_ms, best_counts = ms, stack.counts() - before
        return best_ms, best_counts, floor_us


def run(*, quick: bool = False) -> dict[str, float]:
    iterations = LOOP_ITERATIONS_QUICK if quick else LOOP_ITERATIONS
    print(f"== loop: no-op agent_loop handler continuing {iterations} times, no journal; "
          f"per iteration, best of {LOOP_ROUNDS} runs")  # fmt: skip
    figures: dict[str, float] = {}
    for sync_always, label, key in (
        (True, "single node, sync_interval always", "loop_fsync"),
        (False, "sync_interval default", "loop"),
    ):
        ms, counts, floor_us = trio.run(_measure, sync_always, iterations)
        per = (
            counts.engine / iterations,
            counts.worker / iterations,
            counts.client / iterations,
        )
        print(f"  {label:>34}: {ms:6.2f} ms/iteration | round trips/iteration: "
              f"engine {per[0]:.2f}, worker {per[1]:.2f} (total {per[0] + per[1]:.2f}; "
              f"spec minimum {MIN_ENGINE_PER_ITERATION + MIN_WORKER_PER_ITERATION})")  # fmt: skip
        waited = MIN_WORKER_PER_ITERATION + MIN_ENGINE_PER_ITERATION - PULLS_PER_ITERATION
        ratio = ms * 1000 / (floor_us * waited)
        print(f"  {'':>34}  floor: raw JetStream publish {floor_us:.0f} us on the same "
              f"connection; ratio {ratio:.2f} to {waited} waited round trips")  # fmt: skip
        figures[f"{key}_floor_us"] = round(floor_us, 1)
        figures[f"{key}_ratio"] = round(ratio, 2)
        figures[f"{key}_ms_per_iteration"] = round(ms, 3)
        figures[f"{key}_round_trips_per_iteration"] = round(per[0] + per[1], 2)
    return figures


if __name__ == "__main__":
    run()
