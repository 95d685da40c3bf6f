"""Definitions: durations, validation (every problem at once), ready steps and step inputs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.dag import (
    DEFAULT_RETRY_MAX_ATTEMPTS,
    MAX_DURATION_MS,
    DurationError,
    Problem,
    RetryPolicy,
    RetryStrategy,
    StepType,
    WorkflowDef,
    WorkflowInvalid,
    format_duration,
    parse_duration,
    ready_steps,
    run_output,
    step_input,
    validate,
)
from dagnats_trio.protocol import from_json


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        ("1h30m", 5_400_000),
        (0, 0),
        (1500, 1500),
    ],
)
def test_parse_duration(text: object, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["", "3y", "1.5s", "-1s", "s", -5, True, None, 1.5, "30 s x"])
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(bad)


@given(st.integers(min_value=0, max_value=MAX_DURATION_MS))
def test_duration_round_trip(ms: int) -> None:
    text = format_duration(ms)
    assert isinstance(text, str)
    assert parse_duration(text) == ms


def _wf(*steps: dict[str, Any], name: str = "wf") -> dict[str, Any]:
    return {"name": name, "version": 1, "steps": list(steps)}


def test_valid_definition_round_trips_through_the_converter() -> None:
    d = WorkflowDef.from_json(
        json.dumps(
            _wf(
                {
                    "id": "a",
                    "task": "t",
                    "timeout": "30s",
                    "retry": {
                        "max_attempts": 5,
                        "strategy": "exponential",
                        "initial_delay": "100ms",
                    },
                },
                {
                    "id": "b",
                    "task": "t",
                    "depends_on": ["a"],
                    "type": "agent_loop",
                    "agent_loop": {"max_iterations": 10, "max_duration": "1h", "loop_delay": 50},
                },
                {
                    "id": "c",
                    "type": "sub_workflow",
                    "sub_workflow": {"workflow": "child"},
                    "depends_on": ["a"],
                },
            )
        )
    )
    a = d.step("a")
    assert a.timeout == 30_000
    assert a.retry == RetryPolicy(5, RetryStrategy.EXPONENTIAL, 100, 60_000, 2.0)
    b = d.step("b")
    assert b.type is StepType.AGENT_LOOP and b.agent_loop is not None
    assert b.agent_loop.max_duration == 3_600_000 and b.agent_loop.loop_delay == 50
    assert d.step("c").sub_workflow is not None
    assert from_json(d.to_json(), WorkflowDef) == d
    # The stored form is itself a valid user definition.
    assert WorkflowDef.from_json(d.to_json()) == d
    assert d.step("c").retry.max_attempts == DEFAULT_RETRY_MAX_ATTEMPTS


def test_every_problem_is_reported_at_once() -> None:
    doc = _wf(
        {"id": "a", "task": "t", "depends_on": ["b", "ghost"]},
        {"id": "b", "task": "t", "depends_on": ["a"], "timeout": "3y"},
        {"id": "a", "task": "t"},
        {"id": "bad.id", "task": "t"},
        {"id": "l", "task": "t", "type": "agent_loop", "agent_loop": {"max_iterations": 0}},
        {"id": "m", "task": "t", "type": "agent_loop"},
        {"id": "s", "type": "sub_workflow"},
        {"id": "x", "task": "t", "type": "weird"},
        {"id": "r", "task": "t", "retry": {"max_attempts": 0, "strategy": "random"}},
        name="bad name",
    )
    with pytest.raises(WorkflowInvalid) as info:
        WorkflowDef.from_json(doc)
    problems = info.value.problems
    got = {(p.step, p.field) for p in problems}
    expected = {
        (None, "name"),
        ("a", "depends_on"),  # ghost, and the cycle a -> b -> a
        ("b", "timeout"),
        ("a", "id"),
        ("#3", "id"),
        ("l", "agent_loop.max_iterations"),
        ("m", "agent_loop"),
        ("s", "sub_workflow"),
        ("x", "type"),
        ("r", "retry.max_attempts"),
        ("r", "retry.strategy"),
    }
    assert expected <= got, sorted(got, key=str)
    messages = " ".join(p.message for p in problems)
    assert "ghost" in messages and "cycle" in messages
    assert validate(doc) == problems
    assert all(isinstance(p, Problem) for p in problems)
    assert "bad name" in str(info.value)


def test_valid_definition_has_no_problems() -> None:
    assert validate(_wf({"id": "a", "task": "t"})) == []


@pytest.mark.parametrize("doc", ["not json", "[]", json.dumps({"name": "w", "steps": []})])
def test_malformed_documents(doc: str) -> None:
    with pytest.raises(WorkflowInvalid):
        WorkflowDef.from_json(doc)


def test_unknown_field_is_a_problem() -> None:
    problems = validate(_wf({"id": "a", "task": "t", "dependsOn": ["x"]}))
    assert [(p.step, p.field) for p in problems] == [("a", "dependsOn")]


def test_retry_delays() -> None:
    fixed = RetryPolicy(5, RetryStrategy.FIXED, 100, 1000, 2.0)
    linear = RetryPolicy(5, RetryStrategy.LINEAR, 100, 250, 2.0)
    exp = RetryPolicy(5, RetryStrategy.EXPONENTIAL, 100, 1000, 3.0)
    assert [fixed.delay_ms(n) for n in (1, 2, 3)] == [100, 100, 100]
    assert [linear.delay_ms(n) for n in (1, 2, 3)] == [100, 200, 250]
    assert [exp.delay_ms(n) for n in (1, 2, 3, 10_000)] == [100, 300, 900, 1000]


def test_step_input_rule() -> None:
    d = WorkflowDef.from_json(
        _wf(
            {"id": "a", "task": "t"},
            {"id": "b", "task": "t", "depends_on": ["a"]},
            {"id": "c", "task": "t", "depends_on": ["a", "b"]},
        )
    )
    outputs = {"a": 1, "b": 2}
    assert step_input(d.step("a"), "in", outputs) == "in"
    assert step_input(d.step("b"), "in", outputs) == 1
    assert step_input(d.step("c"), "in", outputs) == {"a": 1, "b": 2}
    assert run_output(d, {"a": 1, "b": 2, "c": 3}) == 3


@st.composite
def _dags(draw: st.DrawFn) -> dict[str, list[str]]:
    n = draw(st.integers(min_value=1, max_value=12))
    ids = [f"s{i}" for i in range(n)]
    deps: dict[str, list[str]] = {}
    for i, sid in enumerate(ids):
        # Dependencies only on earlier steps: acyclic by construction.
        deps[sid] = draw(st.lists(st.sampled_from(ids[:i]), unique=True)) if i else []
    return deps


@settings(max_examples=60, deadline=None)
@given(_dags(), st.randoms(use_true_random=False))
def test_ready_steps_respect_dependencies(deps: dict[str, list[str]], rnd: Any) -> None:
    d = WorkflowDef.from_json(
        _wf(*[{"id": s, "task": "t", "depends_on": ds} for s, ds in deps.items()])
    )
    completed: list[str] = []
    started: list[str] = []
    order: list[str] = []
    while len(completed) < len(deps):
        ready = ready_steps(d, completed, started)
        for sid in ready:
            assert all(dep in completed for dep in deps[sid])
            assert sid not in started
        started.extend(ready)
        running = [s for s in started if s not in completed]
        assert running, "a DAG always has a runnable step until it is done"
        finished = rnd.choice(running)
        completed.append(finished)
        order.append(finished)
    # Every step ran once, each after its dependencies.
    assert sorted(order) == sorted(deps)
    for sid, ds in deps.items():
        assert all(order.index(dep) < order.index(sid) for dep in ds)


@settings(max_examples=40, deadline=None)
@given(_dags(), st.data())
def test_back_edge_is_reported_as_cycle(deps: dict[str, list[str]], data: st.DataObject) -> None:
    ids = list(deps)
    if len(ids) < 2:
        return
    # Add an edge from an early step to a later one that (transitively) depends on it.
    late = data.draw(st.sampled_from(ids[1:]))
    chain = [late]
    while deps[chain[-1]]:
        chain.append(deps[chain[-1]][0])
    if len(chain) < 2:
        return
    root = chain[-1]
    doc = _wf(
        *[
            {"id": s, "task": "t", "depends_on": [*ds, late] if s == root else ds}
            for s, ds in deps.items()
        ]
    )
    problems = validate(doc)
    assert any("cycle" in p.message for p in problems), problems
