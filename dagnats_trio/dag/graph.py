"""Pure questions about a definition's DAG: order, readiness, and what input a step receives."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ..protocol import JsonValue
from .model import StepDef, WorkflowDef


def find_cycle(deps: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle as a path ``[a, b, ..., a]`` when ``deps`` (step -> its dependencies) has one."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(deps, white)
    for root in sorted(deps):
        if colour[root] != white:
            continue
        # Iterative DFS so a long chain cannot hit the recursion limit.
        path: list[str] = [root]
        iters = [iter(sorted(deps[root]))]
        colour[root] = grey
        while path:
            nxt = next(iters[-1], None)
            if nxt is None:
                colour[path.pop()] = black
                iters.pop()
                continue
            if nxt not in colour:
                continue
            if colour[nxt] == grey:
                return [*path[path.index(nxt) :], nxt]
            if colour[nxt] == white:
                colour[nxt] = grey
                path.append(nxt)
                iters.append(iter(sorted(deps[nxt])))
    return None


def ready_steps(
    definition: WorkflowDef, completed: Collection[str], started: Collection[str]
) -> list[str]:
    """Steps not yet started whose dependencies have all completed, in definition order."""
    return [
        s.id
        for s in definition.steps
        if s.id not in started
        and s.id not in completed
        and all(d in completed for d in s.depends_on)
    ]


def sink_steps(definition: WorkflowDef) -> list[StepDef]:
    """Steps nothing depends on: their outputs make the run's output."""
    needed = {d for s in definition.steps for d in s.depends_on}
    return [s for s in definition.steps if s.id not in needed]


def step_input(step: StepDef, run_input: JsonValue, outputs: Mapping[str, JsonValue]) -> JsonValue:
    """The run input with no dependencies, the dependency's output with one, else an object of
    outputs keyed by step id."""
    if not step.depends_on:
        return run_input
    if len(step.depends_on) == 1:
        return outputs.get(step.depends_on[0])
    return {d: outputs.get(d) for d in step.depends_on}


def run_output(definition: WorkflowDef, outputs: Mapping[str, JsonValue]) -> JsonValue:
    """The output of the sink step, or an object keyed by step id when there are several."""
    sinks = sink_steps(definition)
    if len(sinks) == 1:
        return outputs.get(sinks[0].id)
    return {s.id: outputs.get(s.id) for s in sinks}
