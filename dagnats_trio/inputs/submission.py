"""A submission and its life, as pure functions.

A submission moves ``queued -> placed -> done`` when the iteration that placed it commits, or
ends early: ``queued -> withdrawn`` (the caller took it back) or ``queued -> unanswered`` (the
step finished before it was placed). A placed input was seen by the agent, so it can no longer be
withdrawn; the commit of its iteration makes it done, and if the step finishes without that
commit (the iteration failed, was cancelled or timed out) it ends unanswered. The service applies
these functions inside compare-and-set loops, so the rules live here once and are tested alone.
"""

from __future__ import annotations

import enum
from typing import final

import attrs

from dagnats_trio.protocol import JsonValue

from .errors import ConflictError


class Mode(enum.Enum):
    """Where an input enters the conversation: ``steer`` joins the current run after the next
    tool round; ``follow_up`` starts the next run after the agent's final answer."""

    STEER = "steer"
    FOLLOW_UP = "follow_up"


class SubmissionStatus(enum.Enum):
    QUEUED = "queued"
    PLACED = "placed"
    DONE = "done"
    WITHDRAWN = "withdrawn"
    UNANSWERED = "unanswered"

    @property
    def settled(self) -> bool:
        """No further change is possible."""
        return self in _SETTLED


_SETTLED = frozenset(
    {SubmissionStatus.DONE, SubmissionStatus.WITHDRAWN, SubmissionStatus.UNANSWERED}
)

#: Every allowed move of the ordinary life, for documentation and tests; the functions below are
#: the enforcement. Two repairs of a claim the journal never recorded (see ``placement``) are
#: outside it on purpose: :func:`to_adopted` and :func:`to_unanswered_unrecorded`; so is the end
#: of a placed input whose iteration never committed (:func:`to_unanswered_placed`), which only
#: the settlement of a finished step applies (see ``_settlement``).
TRANSITIONS: frozenset[tuple[SubmissionStatus, SubmissionStatus]] = frozenset(
    {
        (SubmissionStatus.QUEUED, SubmissionStatus.PLACED),
        (SubmissionStatus.QUEUED, SubmissionStatus.WITHDRAWN),
        (SubmissionStatus.QUEUED, SubmissionStatus.UNANSWERED),
        (SubmissionStatus.PLACED, SubmissionStatus.DONE),
    }
)


@final
@attrs.frozen
class Submission:
    """One input sent to one step of a run.

    ``order`` is the position in the step's submission order (placement follows it);
    ``placed_iteration`` is set from placement on (and kept when the input ends unanswered because
    the iteration that placed it never committed); ``settled_at_ms`` once the status is settled.
    """

    request_id: str
    run_id: str
    step_id: str
    mode: Mode
    content: JsonValue
    status: SubmissionStatus
    order: int
    submitted_at_ms: int
    placed_iteration: int | None = None
    settled_at_ms: int | None = None


@final
class InvalidTransition(ConflictError):
    """A move the state machine does not allow (for example withdrawing a placed input)."""

    code = "invalid_transition"

    def __init__(self, submission: Submission, target: SubmissionStatus) -> None:
        super().__init__(
            f"input {submission.request_id!r} is {submission.status.value} "
            f"and cannot become {target.value}"
        )
        self.current = submission.status
        self.target = target


def new_submission(
    *,
    request_id: str,
    run_id: str,
    step_id: str,
    mode: Mode,
    content: JsonValue,
    order: int,
    now_ms: int,
) -> Submission:
    return Submission(
        request_id=request_id,
        run_id=run_id,
        step_id=step_id,
        mode=mode,
        content=content,
        status=SubmissionStatus.QUEUED,
        order=order,
        submitted_at_ms=now_ms,
    )


def _require(sub: Submission, current: SubmissionStatus, target: SubmissionStatus) -> None:
    if sub.status is not current:
        raise InvalidTransition(sub, target)


def to_placed(sub: Submission, iteration: int) -> Submission:
    """Claimed by the iteration ``iteration`` of the step."""
    if iteration < 0:
        raise ValueError(f"iteration must be >= 0, got {iteration}")
    _require(sub, SubmissionStatus.QUEUED, SubmissionStatus.PLACED)
    return attrs.evolve(sub, status=SubmissionStatus.PLACED, placed_iteration=iteration)


def to_withdrawn(sub: Submission, now_ms: int) -> Submission:
    _require(sub, SubmissionStatus.QUEUED, SubmissionStatus.WITHDRAWN)
    return attrs.evolve(sub, status=SubmissionStatus.WITHDRAWN, settled_at_ms=now_ms)


def to_unanswered(sub: Submission, now_ms: int) -> Submission:
    _require(sub, SubmissionStatus.QUEUED, SubmissionStatus.UNANSWERED)
    return attrs.evolve(sub, status=SubmissionStatus.UNANSWERED, settled_at_ms=now_ms)


def to_done(sub: Submission, now_ms: int) -> Submission:
    _require(sub, SubmissionStatus.PLACED, SubmissionStatus.DONE)
    return attrs.evolve(sub, status=SubmissionStatus.DONE, settled_at_ms=now_ms)


def to_adopted(sub: Submission, iteration: int) -> Submission:
    """A later iteration takes over a claim that no journal record backs (its holder died
    between the claim and the record): the input stays placed, now by ``iteration``.

    Only the placement code calls this, after reading the journal; the record is the truth.
    """
    _require(sub, SubmissionStatus.PLACED, SubmissionStatus.PLACED)
    if sub.placed_iteration is not None and iteration <= sub.placed_iteration:
        raise ValueError(
            f"input {sub.request_id!r} was claimed by iteration {sub.placed_iteration}; "
            f"iteration {iteration} cannot adopt it"
        )
    return attrs.evolve(sub, placed_iteration=iteration)


def to_unanswered_unrecorded(sub: Submission, now_ms: int) -> Submission:
    """The step finished and this claim was never recorded: the agent never saw the input, so
    it ends unanswered like a queued one (settlement calls this after reading the journal)."""
    _require(sub, SubmissionStatus.PLACED, SubmissionStatus.UNANSWERED)
    return attrs.evolve(
        sub, status=SubmissionStatus.UNANSWERED, placed_iteration=None, settled_at_ms=now_ms
    )


def to_unanswered_placed(sub: Submission, now_ms: int) -> Submission:
    """The step finished and the iteration that placed this input never committed (it failed,
    was cancelled or timed out): nothing the agent did with it was kept, so it ends unanswered;
    ``placed_iteration`` stays to say the agent saw it (settlement calls this after reading the
    journal)."""
    _require(sub, SubmissionStatus.PLACED, SubmissionStatus.UNANSWERED)
    return attrs.evolve(sub, status=SubmissionStatus.UNANSWERED, settled_at_ms=now_ms)
