"""Claiming a step's journal: judge the tail, then plan the claim over the entries read, and
the view of recorded calls and earlier attempts' unsafe starts that replay works from.

Pure (no I/O, no clock, no randomness); the terms (entries, segment, this attempt) are those of
:mod:`._replay`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import TypeAlias

import attrs

from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    InputPlacedRecord,
    JournalRecord,
    JsonValue,
    ModelRecord,
    Replay,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
)

from ._replay_task import Entry, TaskIdentity, canonical_json

# ---------------------------------------------------------------------------------------------
# Step 1 of Journal(): judge the tail.
# ---------------------------------------------------------------------------------------------


class TailKind(enum.Enum):
    EMPTY = "empty"  # nothing on the subject: claim at once (fast path)
    BASE = "base"  # the tail is the previous iteration's continue commit: claim at once
    STALE = "stale"  # a later iteration owns the journal
    COMMITTED = "committed"  # the tail is this dispatch's own commit
    READ = "read"  # read the entries from ``read_from`` and plan with them


@attrs.frozen
class TailVerdict:
    kind: TailKind
    read_from: int = 1
    reason: str = ""


def judge_tail(tail: Entry | None, task: TaskIdentity) -> TailVerdict:
    if tail is None:
        return TailVerdict(TailKind.EMPTY)
    _, rec = tail
    if rec.iteration > task.iteration:
        return TailVerdict(
            TailKind.STALE, reason=f"the journal is at iteration {rec.iteration} already"
        )
    if isinstance(rec, CommitRecord) and rec.nonce == task.nonce:
        return TailVerdict(TailKind.COMMITTED)
    if (
        isinstance(rec, CommitRecord)
        and rec.action is CommitAction.CONTINUE
        and rec.iteration == task.iteration - 1
    ):
        return TailVerdict(TailKind.BASE)
    return TailVerdict(TailKind.READ, read_from=task.journal_seq or 1)


# ---------------------------------------------------------------------------------------------
# Step 2: plan the claim over the entries read (base commit .. tail).
# ---------------------------------------------------------------------------------------------


@attrs.frozen
class RecordedModel:
    response: JsonValue


@attrs.frozen
class RecordedTool:
    intent: ToolIntentRecord
    result: ToolResultRecord | None
    partial: tuple[JsonValue, ...]


RecordedCall: TypeAlias = RecordedModel | RecordedTool


@attrs.frozen
class Origin:
    """An unsafe tool start of an earlier attempt: a retry honours it instead of starting again."""

    attempt: int
    call: int
    name: str
    input_json: str
    result: ToolResultRecord | None
    partial: tuple[JsonValue, ...]


@attrs.frozen
class ReplayView:
    """Everything the handle needs to replay one delivery, computed once at claim time."""

    iteration: int
    attempt: int
    call_offset: int
    calls: Mapping[int, RecordedCall]
    origins: tuple[Origin, ...]
    placed: tuple[InputPlacedRecord, ...]
    #: The commit the state comes from (previous iteration's continue, or the last pause), if
    #: it was among the entries read.
    base: Entry | None


def empty_view(task: TaskIdentity, base: Entry | None = None) -> ReplayView:
    return ReplayView(task.iteration, task.attempt, 0, {}, (), (), base)


class PlanKind(enum.Enum):
    PROCEED = "proceed"
    STALE = "stale"
    COMMITTED = "committed"
    #: An earlier attempt's commit ended the iteration after the engine gave up on that attempt
    #: (a step timeout, or a holder that failed outside the journal): the commit is the state of
    #: record, so this dispatch republishes it under its own identity instead of doing it again.
    ADOPT = "adopt"
    NEED_FULL_READ = "need_full_read"


@attrs.frozen
class ClaimPlan:
    kind: PlanKind
    view: ReplayView | None = None
    #: True when the last ``restart_limit`` entries before the new claim are all claims of this
    #: iteration: the claim is appended, then the failure is committed.
    restart_limit: bool = False
    reason: str = ""
    #: For ADOPT: the commit that ended the iteration.
    commit: Entry | None = None


def _ends_iteration(rec: CommitRecord) -> bool:
    return rec.action in (CommitAction.CONTINUE, CommitAction.COMPLETE) or (
        rec.action is CommitAction.FAIL and not rec.retriable
    )


def plan_claim(
    entries: Sequence[Entry], task: TaskIdentity, restart_limit: int, *, full: bool
) -> ClaimPlan:
    """Decide what the claim does, given the entries from the base commit to the tail.

    ``full`` says the entries start at the subject's first record; otherwise they start at the
    task's ``journal_seq`` and must begin with an earlier iteration's record, else the earlier
    part of this iteration is missing and the caller reads everything (``NEED_FULL_READ``).
    """
    i = task.iteration
    if not full and (not entries or entries[0][1].iteration >= i):
        return ClaimPlan(PlanKind.NEED_FULL_READ)
    if entries and entries[-1][1].iteration > i:
        return ClaimPlan(PlanKind.STALE, reason="a later iteration owns the journal")
    last = entries[-1][1] if entries else None
    if isinstance(last, CommitRecord) and last.nonce == task.nonce:
        return ClaimPlan(PlanKind.COMMITTED)

    mine = [(s, r) for s, r in entries if r.iteration == i]
    for seq, rec in mine:
        if isinstance(rec, CommitRecord) and rec.nonce == task.nonce:
            return ClaimPlan(PlanKind.STALE, reason="this dispatch committed; a later one holds it")
        if isinstance(rec, CommitRecord) and _ends_iteration(rec):
            if rec.attempt < task.attempt:
                return ClaimPlan(
                    PlanKind.ADOPT,
                    reason=f"attempt {rec.attempt} ended iteration {i} at sequence {seq}",
                    commit=(seq, rec),
                )
            return ClaimPlan(PlanKind.STALE, reason=f"iteration {i} already ended")
        if rec.attempt > task.attempt:
            return ClaimPlan(
                PlanKind.STALE, reason=f"attempt {rec.attempt} of iteration {i} holds it"
            )

    base: Entry | None = None
    for s, r in entries:
        if isinstance(r, CommitRecord) and r.iteration < i and r.action is CommitAction.CONTINUE:
            base = (s, r)
    pause_at = -1
    for idx, (_, r) in enumerate(mine):
        if isinstance(r, CommitRecord) and r.action is CommitAction.PAUSE:
            pause_at = idx
    if pause_at >= 0:
        base = mine[pause_at]
    offset = 1 + max((_call_of(r) for _, r in mine[: pause_at + 1]), default=-1)
    segment = [r for _, r in mine[pause_at + 1 :]]

    hit = restart_limit_reached(entries, i, restart_limit)
    view = ReplayView(
        iteration=i,
        attempt=task.attempt,
        call_offset=offset,
        calls=_calls_of_attempt(segment, task.attempt),
        origins=_origins(segment, task.attempt),
        placed=_placed(segment),
        base=base,
    )
    return ClaimPlan(PlanKind.PROCEED, view=view, restart_limit=hit)


def restart_limit_reached(entries: Sequence[Entry], iteration: int, restart_limit: int) -> bool:
    """The last ``restart_limit`` entries before a new claim are all claims of ``iteration``.

    So a step fails after ``restart_limit`` claims in a row made no progress: with the default 5,
    the sixth claim commits the failure; with 1, the second. A pause commit is a record between
    claims, so it counts as progress.
    """
    if restart_limit < 1 or len(entries) < restart_limit:
        return False
    return all(
        isinstance(r, ClaimRecord) and r.iteration == iteration for _, r in entries[-restart_limit:]
    )


def _call_of(rec: JournalRecord) -> int:
    if isinstance(rec, ModelRecord | ToolIntentRecord | ToolOutputRecord | ToolResultRecord):
        return rec.call
    return -1


def _tools_by_attempt_call(
    segment: Sequence[JournalRecord],
) -> dict[tuple[int, int], RecordedTool]:
    intents: dict[tuple[int, int], ToolIntentRecord] = {}
    results: dict[tuple[int, int], ToolResultRecord] = {}
    partial: dict[tuple[int, int], list[JsonValue]] = {}
    for r in segment:
        k = (r.attempt, _call_of(r))
        if isinstance(r, ToolIntentRecord):
            intents.setdefault(k, r)
        elif isinstance(r, ToolResultRecord):
            results.setdefault(k, r)
        elif isinstance(r, ToolOutputRecord):
            partial.setdefault(k, []).append(r.chunk)
    return {
        k: RecordedTool(intent, results.get(k), tuple(partial.get(k, ())))
        for k, intent in intents.items()
    }


def _calls_of_attempt(segment: Sequence[JournalRecord], attempt: int) -> dict[int, RecordedCall]:
    calls: dict[int, RecordedCall] = {}
    for r in segment:
        if isinstance(r, ModelRecord) and r.attempt == attempt:
            calls.setdefault(r.call, RecordedModel(r.response))
    for (a, c), tool in _tools_by_attempt_call(segment).items():
        if a == attempt:
            calls.setdefault(c, tool)
    return calls


def _origins(segment: Sequence[JournalRecord], attempt: int) -> tuple[Origin, ...]:
    """Unsafe starts of earlier attempts, replaying the honour rule attempt by attempt.

    An intent written by a retry that honoured an earlier start is not a start itself; the same
    matching rule, run over each earlier attempt in order, tells the two apart from records alone
    (every earlier attempt's records precede the claims of later attempts).
    """
    tools = _tools_by_attempt_call(segment)
    origins: list[Origin] = []
    for b in sorted({a for a, _ in tools if a < attempt}):
        prior = tuple(origins)  # starts of attempts before b: the ones b could honour
        consumed: set[int] = set()
        for _, c in sorted(k for k in tools if k[0] == b):
            t = tools[(b, c)]
            key = _input_json(t.intent.input)
            match = _first_match(prior, consumed, c, t.intent.name, key, t.intent.replay)
            if match is not None:
                consumed.add(match)
            elif t.intent.replay is Replay.UNSAFE:
                origins.append(Origin(b, c, t.intent.name, key, t.result, t.partial))
    return tuple(origins)


def _input_json(value: JsonValue) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return repr(value)


def _first_match(
    origins: Sequence[Origin],
    consumed: set[int] | frozenset[int],
    call: int,
    name: str,
    input_json: str,
    replay: Replay,
) -> int | None:
    """The earlier unsafe start a call honours: one at the same position first; an unsafe call
    also takes one from another position (calls may shift between attempts), a call declared
    safe does not, so a safe call can never use up the honour an unsafe call needs."""
    fallback: int | None = None
    for idx, o in enumerate(origins):
        if idx in consumed or o.name != name or o.input_json != input_json:
            continue
        if o.call == call:
            return idx
        if fallback is None and replay is Replay.UNSAFE:
            fallback = idx
    return fallback


def _placed(segment: Sequence[JournalRecord]) -> tuple[InputPlacedRecord, ...]:
    seen: set[str] = set()
    out: list[InputPlacedRecord] = []
    for r in segment:
        if isinstance(r, InputPlacedRecord) and r.request_id not in seen:
            seen.add(r.request_id)
            out.append(r)
    return tuple(out)
