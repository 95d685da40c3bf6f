"""``engine._replace.replace``: the engine's copy of a frozen value with some fields changed
(one construction, in place of ``attrs.evolve``), checked against ``attrs.evolve`` itself."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagnats_trio.engine import _replace
from dagnats_trio.engine._replace import replace
from dagnats_trio.engine.snapshot import Park, RunSnapshot, StepState, StepStatus
from dagnats_trio.protocol import DispatchId, RunStatus

_changes = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(StepStatus),
        "park": st.none() | st.sampled_from(Park),
        "dispatch": st.none()
        | st.builds(DispatchId, st.integers(0, 9), st.integers(1, 9), st.just("n1")),
        "output": st.none() | st.integers() | st.text(),
        "iterations": st.integers(0, 100),
        "wake_at_ms": st.none() | st.integers(0, 2**40),
        "journal_seq": st.none() | st.integers(1, 2**40),
    },
)


@given(_changes, _changes)
def test_a_step_copy_is_what_evolve_makes(
    first: dict[str, object], then: dict[str, object]
) -> None:
    base = attrs.evolve(StepState("s"), **first)
    assert replace(base, **then) == attrs.evolve(base, **then)
    assert replace(base) == base


def test_a_snapshot_copy_is_what_evolve_makes() -> None:
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", None, {"x": 1}, steps={"s": StepState("s")})
    changes = {"status": RunStatus.FAILED, "error": "boom", "finished_at_ms": 7}
    assert replace(snap, **changes) == attrs.evolve(snap, **changes)


def test_an_unknown_field_is_the_same_type_error() -> None:
    with pytest.raises(TypeError):
        replace(StepState("s"), no_such_field=1)


@attrs.frozen
class _Private:
    a: int
    _b: int = attrs.field(default=2)
    c: int = attrs.field(init=False, default=3)


def test_a_class_with_an_alias_or_no_init_field_goes_through_evolve() -> None:
    assert replace(_Private(1, b=5), a=4) == attrs.evolve(_Private(1, b=5), a=4) == _Private(4, b=5)


def test_the_plans_are_fixed_at_import() -> None:
    """The table of copy plans is built at import for the engine's two classes and is
    read-only: copying another class adds nothing to it (no process-wide cache)."""
    assert set(_replace._PLANS) == {RunSnapshot, StepState}
    with pytest.raises(TypeError):
        _replace._PLANS[_Private] = None  # type: ignore[index]
    assert replace(_Private(1), a=2) == _Private(2)
    assert set(_replace._PLANS) == {RunSnapshot, StepState}
