"""The pure state machine of a submission, driven by Hypothesis."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagnats_trio.inputs import (
    TRANSITIONS,
    InvalidTransition,
    Mode,
    Submission,
    SubmissionStatus,
    to_done,
    to_placed,
    to_unanswered,
    to_withdrawn,
)
from dagnats_trio.inputs.submission import new_submission

Op = tuple[str, Callable[[Submission], Submission]]

ops = st.one_of(
    st.builds(lambda i: ("place", lambda s: to_placed(s, i)), st.integers(0, 1000)),
    st.builds(lambda t: ("withdraw", lambda s: to_withdrawn(s, t)), st.integers(0, 10**13)),
    st.builds(lambda t: ("unanswer", lambda s: to_unanswered(s, t)), st.integers(0, 10**13)),
    st.builds(lambda t: ("done", lambda s: to_done(s, t)), st.integers(0, 10**13)),
)

TARGET = {
    "place": SubmissionStatus.PLACED,
    "withdraw": SubmissionStatus.WITHDRAWN,
    "unanswer": SubmissionStatus.UNANSWERED,
    "done": SubmissionStatus.DONE,
}


def fresh(mode: Mode = Mode.STEER) -> Submission:
    return new_submission(
        request_id="r1",
        run_id="run",
        step_id="agent",
        mode=mode,
        content={"t": 1},
        order=3,
        now_ms=5,
    )


@given(st.lists(ops, max_size=12), st.sampled_from(list(Mode)))
def test_any_sequence_keeps_the_invariants(sequence: list[Op], mode: Mode) -> None:
    sub = fresh(mode)
    path = [sub.status]
    for name, op in sequence:
        before = sub
        allowed = (before.status, TARGET[name]) in TRANSITIONS
        try:
            sub = op(before)
        except InvalidTransition as exc:
            assert not allowed
            assert exc.current is before.status and exc.target is TARGET[name]
            assert exc.status == 409
            continue
        assert allowed
        assert sub.status is TARGET[name]
        path.append(sub.status)
        # What was submitted never changes.
        assert (sub.request_id, sub.mode, sub.content, sub.order, sub.submitted_at_ms) == (
            "r1",
            mode,
            {"t": 1},
            3,
            5,
        )
        # Placement is kept once made; settlement time is set exactly when settled.
        assert (sub.placed_iteration is not None) == (
            sub.status in (SubmissionStatus.PLACED, SubmissionStatus.DONE)
        )
        if before.placed_iteration is not None:
            assert sub.placed_iteration == before.placed_iteration
        assert (sub.settled_at_ms is not None) == sub.status.settled
    # A settled submission never moves again, and nothing ever returns to queued.
    for i, status in enumerate(path):
        if status.settled:
            assert path[i:] == [status]
    assert SubmissionStatus.QUEUED not in path[1:]


@given(st.lists(ops, min_size=1, max_size=12))
def test_settled_states_reject_every_move(sequence: list[Op]) -> None:
    for settle in (
        lambda s: to_withdrawn(s, 1),
        lambda s: to_unanswered(s, 1),
        lambda s: to_done(to_placed(s, 0), 1),
    ):
        sub = settle(fresh())
        for _name, op in sequence:
            with pytest.raises(InvalidTransition):
                op(sub)


def test_a_placed_input_cannot_be_withdrawn_or_left_unanswered() -> None:
    placed = to_placed(fresh(), 7)
    assert placed.placed_iteration == 7
    with pytest.raises(InvalidTransition, match="is placed and cannot become withdrawn"):
        to_withdrawn(placed, 1)
    with pytest.raises(InvalidTransition):
        to_unanswered(placed, 1)
    with pytest.raises(InvalidTransition):
        to_placed(placed, 8)
    assert to_done(placed, 9).status is SubmissionStatus.DONE


def test_a_queued_input_cannot_be_done_and_iteration_must_be_valid() -> None:
    with pytest.raises(InvalidTransition):
        to_done(fresh(), 1)
    with pytest.raises(ValueError, match="iteration"):
        to_placed(fresh(), -1)
