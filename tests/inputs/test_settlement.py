"""The settlement of a finished step's submissions, as pure functions, driven by Hypothesis.

A model step runs random sequences of submit, withdraw, place (with a crash between the claim
and the record now and then), commit (continue or pause, with the worker's ``done`` marking
lost now and then), retriable failures and worker crashes, and then finishes by completing,
failing for good, being cancelled or timing out. The journal it writes is folded by
``journal_placements`` and every submission is settled with ``settle_finished``: each must end
done exactly when the iteration that placed it committed, and unanswered (or withdrawn)
otherwise, whatever was lost on the way; settling again, or a late marking, changes nothing.
"""

from __future__ import annotations

import enum

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.inputs import (
    InvalidTransition,
    Mode,
    Submission,
    SubmissionStatus,
    to_done,
    to_placed,
    to_withdrawn,
)
from dagnats_trio.inputs._settlement import journal_placements, settle_finished
from dagnats_trio.inputs.submission import (
    new_submission,
    to_adopted,
    to_unanswered_placed,
)
from dagnats_trio.protocol import CommitAction, CommitRecord, InputPlacedRecord, JournalRecord

#: Request ids the model draws from: few, so sequences touch the same inputs often.
REQUEST_IDS = ("r0", "r1", "r2", "r3", "r4")
#: Longest random sequence before the step finishes.
MAX_OPS = 40
#: Hypothesis examples per property (each is a few hundred pure calls).
EXAMPLES = 400


class Finish(enum.Enum):
    COMPLETE = "complete"
    FAIL_PERMANENT = "fail_permanent"
    CANCEL = "cancel"
    TIMEOUT = "timeout"


@attrs.define
class Step:
    """A step's store and journal as the worker and the inputs service would leave them."""

    kv: dict[str, Submission] = attrs.field(factory=dict)
    journal: list[JournalRecord] = attrs.field(factory=list)
    iteration: int = 0
    attempt: int = 1
    order: int = 0
    now: int = 1000
    #: Placed in the current segment of the iteration (reset by a pause or continue commit).
    segment: list[str] = attrs.field(factory=list)
    #: The ground truth: ids whose placing segment committed.
    committed: set[str] = attrs.field(factory=set)
    recorded: set[str] = attrs.field(factory=set)
    #: Ids the worker's marking moved to done before the step finished.
    marked: set[str] = attrs.field(factory=set)
    withdrawn: set[str] = attrs.field(factory=set)

    def tick(self) -> int:
        self.now += 1
        return self.now

    # --- operations ----------------------------------------------------------------------------

    def submit(self, rid: str) -> None:
        if rid not in self.kv:
            self.kv[rid] = new_submission(
                request_id=rid,
                run_id="run",
                step_id="agent",
                mode=Mode.STEER,
                content=rid,
                order=self.order,
                now_ms=self.tick(),
            )
            self.order += 1

    def withdraw(self, rid: str) -> None:
        sub = self.kv.get(rid)
        if sub is None:
            return
        try:
            self.kv[rid] = to_withdrawn(sub, self.tick())
        except InvalidTransition:
            assert sub.status is not SubmissionStatus.QUEUED
            return
        self.withdrawn.add(rid)

    def place(self, rid: str, crash_before_record: bool) -> None:
        """Claim (or adopt an unrecorded claim), then record, as ``place_inputs`` does."""
        sub = self.kv.get(rid)
        if sub is None or rid in self.recorded:
            return
        if sub.status is SubmissionStatus.QUEUED:
            sub = to_placed(sub, self.iteration)
        elif sub.status is SubmissionStatus.PLACED:
            if sub.placed_iteration is not None and sub.placed_iteration < self.iteration:
                sub = to_adopted(sub, self.iteration)
        else:
            return
        self.kv[rid] = sub
        if crash_before_record:
            self.attempt += 1  # the holder died between the claim and the record
            return
        self.journal.append(InputPlacedRecord(self.iteration, self.attempt, "c", rid, "steer", rid))
        self.recorded.add(rid)
        self.segment.append(rid)

    def commit(self, action: CommitAction, *, retriable: bool = True, lose_marking: bool) -> None:
        nonce = f"n{len(self.journal)}"
        self.journal.append(
            CommitRecord(self.iteration, self.attempt, "c", nonce, action, retriable=retriable)
        )
        if action is CommitAction.FAIL:
            if retriable:
                self.attempt += 1  # the same iteration runs again, its segment kept
            return
        self.committed.update(self.segment)
        if not lose_marking:
            for rid in self.segment:
                self.kv[rid] = to_done(self.kv[rid], self.tick())
                self.marked.add(rid)
        self.segment = []
        if action is CommitAction.CONTINUE:
            self.iteration += 1
            self.attempt = 1

    def crash(self) -> None:
        self.attempt += 1  # the worker died mid-iteration; the segment stays open

    def finish(self, how: Finish, lose_marking: bool) -> None:
        if how is Finish.COMPLETE:
            self.commit(CommitAction.COMPLETE, lose_marking=lose_marking)
        elif how is Finish.FAIL_PERMANENT:
            self.commit(CommitAction.FAIL, retriable=False, lose_marking=lose_marking)
        # A cancel or a timeout leaves nothing in the journal: the holder is stopped.


op = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(REQUEST_IDS)),
    st.tuples(st.just("withdraw"), st.sampled_from(REQUEST_IDS)),
    st.tuples(st.just("place"), st.sampled_from(REQUEST_IDS), st.booleans()),
    st.tuples(st.just("continue"), st.booleans()),
    st.tuples(st.just("pause"), st.booleans()),
    st.tuples(st.just("fail"), st.just(None)),
    st.tuples(st.just("crash"), st.just(None)),
)


def run_ops(step: Step, ops: list[tuple[object, ...]]) -> None:
    for name, *args in ops:
        if name == "submit":
            step.submit(str(args[0]))
        elif name == "withdraw":
            step.withdraw(str(args[0]))
        elif name == "place":
            step.place(str(args[0]), bool(args[1]))
        elif name == "continue":
            step.commit(CommitAction.CONTINUE, lose_marking=bool(args[0]))
        elif name == "pause":
            step.commit(CommitAction.PAUSE, lose_marking=bool(args[0]))
        elif name == "fail":
            step.commit(CommitAction.FAIL, lose_marking=False)
        else:
            step.crash()


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(op, max_size=MAX_OPS),
    st.sampled_from(list(Finish)),
    st.booleans(),
    st.integers(0, 3),
)
def test_every_submission_ends_done_exactly_when_its_iteration_committed(
    ops: list[tuple[object, ...]], how: Finish, lose_marking: bool, settle_crashes: int
) -> None:
    step = Step()
    run_ops(step, ops)
    before = dict(step.kv)
    step.finish(how, lose_marking)
    journal = journal_placements(step.journal)
    assert journal.committed == frozenset(step.committed)
    assert set(journal.recorded) == step.recorded

    # The settlement may be cut short by a crash and repeated: a prefix first, then all of it.
    now = step.tick()
    settled = dict(step.kv)
    for rid in sorted(settled)[:settle_crashes]:
        settled[rid] = settle_finished(settled[rid], journal, now)
    settled = {rid: settle_finished(sub, journal, now) for rid, sub in settled.items()}

    for rid, sub in settled.items():
        assert sub.status.settled, rid
        # What was submitted never changes.
        assert (sub.request_id, sub.mode, sub.content, sub.order) == (
            before[rid].request_id,
            before[rid].mode,
            before[rid].content,
            before[rid].order,
        )
        if rid in step.withdrawn:
            assert sub.status is SubmissionStatus.WITHDRAWN
        elif rid in step.committed:
            assert sub.status is SubmissionStatus.DONE
            assert sub.placed_iteration == journal.recorded[rid]
        else:
            assert sub.status is SubmissionStatus.UNANSWERED
            # The placement is kept exactly when the agent saw the input.
            assert (sub.placed_iteration is not None) == (rid in step.recorded)
        # A done the worker marked is never taken back.
        if rid in step.marked:
            assert sub.status is SubmissionStatus.DONE
        # Settling again, or a late marking by a zombie holder, changes nothing.
        assert settle_finished(sub, journal, now + 1) == sub
        with pytest.raises(InvalidTransition):
            to_done(sub, now + 1)


def test_a_failed_iteration_keeps_its_placement_and_a_pause_commits_its_segment() -> None:
    step = Step()
    for rid in ("a", "b", "c"):
        step.submit(rid)
    step.place("a", crash_before_record=False)
    step.commit(CommitAction.PAUSE, lose_marking=True)  # "a" committed by the pause
    step.place("b", crash_before_record=False)
    step.commit(CommitAction.FAIL, lose_marking=False)  # retriable: "b" still open
    step.place("c", crash_before_record=True)  # claimed, never recorded
    step.finish(Finish.FAIL_PERMANENT, lose_marking=False)
    journal = journal_placements(step.journal)
    out = {rid: settle_finished(sub, journal, 9) for rid, sub in step.kv.items()}
    assert {rid: (s.status, s.placed_iteration) for rid, s in out.items()} == {
        "a": (SubmissionStatus.DONE, 0),
        "b": (SubmissionStatus.UNANSWERED, 0),
        "c": (SubmissionStatus.UNANSWERED, None),
    }
    assert all(s.settled_at_ms == 9 for s in out.values())


def test_only_a_placed_input_can_end_unanswered_with_its_placement() -> None:
    sub = new_submission(
        request_id="r", run_id="run", step_id="s", mode=Mode.STEER, content=1, order=0, now_ms=1
    )
    with pytest.raises(InvalidTransition):
        to_unanswered_placed(sub, 2)
    ended = to_unanswered_placed(to_placed(sub, 4), 2)
    assert (ended.status, ended.placed_iteration, ended.settled_at_ms) == (
        SubmissionStatus.UNANSWERED,
        4,
        2,
    )
    with pytest.raises(InvalidTransition):
        to_unanswered_placed(ended, 3)
