"""Issue 12 goal 3 (CPU per run): the scheduler steps an agent run costs the runtime's own
tasks, counted with a Trio instrument on the bench's stack and a real nats-server (a count, so
the machine's load barely moves it).

Each step is a pass of a task through Trio's run loop; a step that only yields (a checkpoint on
a call that completes at once) is CPU on the run's critical path for nothing. The connection's
reader is left out (one step per socket read: a loaded machine splits reads), and so are the
bench's own tasks; the caller's task (starting the run, waiting for its end) is counted.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

import trio

from bench._stack import RUN_TIMEOUT_S, open_stack
from bench.agent import HEADLINE
from dagnats_trio.testing import AGENT_TASK, ScriptedAgent, agent_workflow, expected_answer

WORKFLOW: Final = "steps-agent"
WARMUP_RUNS: Final = 3
RUNS: Final = 10
#: Task names (``module.qualname`` of the task's function) left out of the count.
NOT_COUNTED: Final = ("dagnats_trio.nats.", "bench.")
#: Steps of the runtime's tasks per scripted agent run (4 model calls, 3 tool calls): 85
#: measured before ``ack_nowait`` was a plain call, the pull loop took a free slot without a
#: step and ``run_all`` ran its last call in the caller's task; 68 since; 67 since a start
#: takes a free place among the starts in flight without a step; 65 since a final answer is
#: stored with its commit (then_complete: one request fewer); 58.5 since a run's end purges in
#: one call and a start sends its definition read with its index writes in one call (no task
#: and no nursery for either: 64.2 measured just before); 51.5 since the scripted agent's model
#: and tool functions do not yield (4 model calls, 3 tool calls: the journal's appends around
#: them wait on the server); 47.6 since the native puller hands each delivery to the worker in
#: the connection's reader (``on_delivery``: the pull loop no longer wakes per delivery, 4 per
#: run). The bound leaves two steps for a read split in two on a loaded machine.
MAX_STEPS_PER_RUN: Final = 50
#: The engine's history loop's own steps per run: one per delivered event (5) and one per
#: answer of its compare-and-set (5) and task publish (4). 16 while it made each run's end
#: itself (the purges' answer, and their nursery's exit); none since the run-end task makes
#: them (``engine._run_ends``), whose steps are counted in the total above.
MAX_HISTORY_LOOP_STEPS_PER_RUN: Final = 14
#: The history loop's task, as the instrument names it.
HISTORY_LOOP: Final = "dagnats_trio.engine._shell.Engine._history_loop"


class Steps(trio.abc.Instrument):
    """Steps per task name; the caller's own task is counted under ``"caller"``."""

    def __init__(self, caller: trio.lowlevel.Task) -> None:
        self.caller = caller
        self.by_name: Counter[str] = Counter()

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.by_name["caller" if task is self.caller else task.name] += 1


async def test_an_agent_run_costs_the_runtime_few_scheduler_steps() -> None:
    agent = ScriptedAgent(paired=HEADLINE.paired)
    async with open_stack(
        sync_always=False,
        handlers={AGENT_TASK: agent.turn},
        workflows=[agent_workflow(WORKFLOW)],
    ) as stack:
        for _ in range(WARMUP_RUNS):
            await stack.run(WORKFLOW, {"task": "deploy"})
        # The count spans exactly the runs' own work: the warm-up's run ends are done before
        # it starts and the last run's before it stops (made after the client saw the run
        # finished); the caller's steps of that last wait are counted (0.2 per run at most).
        await stack.wait_settled()
        counter = Steps(trio.lowlevel.current_task())
        trio.lowlevel.add_instrument(counter)
        try:
            with trio.fail_after(RUNS * RUN_TIMEOUT_S):
                answers = [(await stack.run(WORKFLOW, {"task": "deploy"})) for _ in range(RUNS)]
                await stack.settled()
        finally:
            trio.lowlevel.remove_instrument(counter)
    assert all(snap.outputs().get("agent") == expected_answer() for snap in answers)
    counted = {name: n for name, n in counter.by_name.items() if not name.startswith(NOT_COUNTED)}
    per_run = sum(counted.values()) / RUNS
    shown = ", ".join(f"{name.rsplit('.', 2)[-2:]}: {n / RUNS:.1f}" for name, n in counted.items())
    print(f"scheduler steps per agent run: {per_run:.1f} ({shown})")
    assert counted.get("caller", 0) > 0  # the count saw the runs
    assert per_run <= MAX_STEPS_PER_RUN
    assert 0 < counter.by_name[HISTORY_LOOP] / RUNS <= MAX_HISTORY_LOOP_STEPS_PER_RUN
