"""The journal's rules as pure functions over records: no I/O, no clock, no randomness.

The shell (``_open``, ``_handle``, ``_fencing``) does the reads and writes; every decision it
makes comes from here, so the rules of the spec ("The journal", "Tools", "Model calls", retry
versus redelivery, "Restart limit") can be tested one by one with Hypothesis.

Terms used throughout:

- *entries* are ``(sequence, record)`` pairs of one step's journal, in sequence order;
- an *iteration's records* are the entries whose record names that iteration;
- a *segment* is the part of an iteration after its last pause commit. A pause is a commit point:
  the state it carries is the state of record, the calls before it are done, and call positions
  after it continue from where they stopped (so every call key of an iteration is distinct);
- *this attempt* is the task's attempt. Redelivery of one attempt replays its recorded calls by
  position; a new attempt runs safe calls and model requests fresh and honours only the unsafe
  tool intents of earlier attempts (in the segment), matched by name and input.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from typing import TypeAlias, final

import attrs

from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    DispatchId,
    InputPlacedRecord,
    JournalRecord,
    JsonValue,
    LifecycleEvent,
    ModelRecord,
    Replay,
    TaskMessage,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
    check_json,
    lifecycle_event,
)

Entry: TypeAlias = tuple[int, JournalRecord]

#: Upper bound on model and tool calls in one iteration (positions 0 .. this - 1).
MAX_CALLS_PER_ITERATION = 1000

#: ``reason`` of the failure committed when the restart limit is reached.
RESTART_LIMIT_REASON = "restart_limit"
#: The ``reason`` of the failure committed when the journal holds an unreadable record.
UNREADABLE_REASON = "journal_unreadable"

#: Prefix of the error recorded for a tool whose output was not JSON (replayed as an error).
NOT_JSON_ERROR_PREFIX = "tool output is not JSON: "


def canonical_json(value: JsonValue) -> str:
    """One spelling per JSON value, so recorded and current inputs compare as JSON, not Python
    (where ``True == 1``). Raises ValueError (:class:`JsonPolicyError`) for values that are not
    JSON by the one policy."""
    check_json(value)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def call_key(run_id: str, step_id: str, iteration: int, call: int) -> str:
    """The idempotency key of a call: the same on every delivery and attempt."""
    return f"{run_id}.{step_id}.{iteration}.{call}"


# ---------------------------------------------------------------------------------------------
# The task as the rules see it.
# ---------------------------------------------------------------------------------------------


@final
@attrs.frozen
class TaskIdentity:
    run_id: str
    step_id: str
    iteration: int
    attempt: int
    nonce: str
    journal_seq: int | None = None

    @classmethod
    def of(cls, task: TaskMessage) -> TaskIdentity:
        d = task.dispatch
        return cls(task.run_id, task.step_id, d.iteration, d.attempt, d.nonce, task.journal_seq)

    @property
    def dispatch(self) -> DispatchId:
        return DispatchId(self.iteration, self.attempt, self.nonce)


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


# ---------------------------------------------------------------------------------------------
# Calls at a position.
# ---------------------------------------------------------------------------------------------


@final
@attrs.frozen
class ToolResult:
    """What ``Journal.tool`` returns: the tool's output, or its own error, or an interruption."""

    output: JsonValue = None
    error: str | None = None
    interrupted: bool = False
    partial: tuple[JsonValue, ...] = ()
    #: In a group with cancel-on-error: the position of the member whose failure cancelled this.
    cancelled_by: int | None = None

    @classmethod
    def of(cls, rec: ToolResultRecord) -> ToolResult:
        return cls(rec.output, rec.error, rec.interrupted, tuple(rec.partial), rec.cancelled_by)


class ToolAction(enum.Enum):
    REUSE = "reuse"  # a recorded result: return it, write nothing
    RECORD = "record"  # write ``result`` (after the intent when ``write_intent``) and return it
    RERUN = "rerun"  # a safe intent without a result: run fn again under the recorded intent
    RUN = "run"  # write the intent, run fn, write the result
    MISMATCH = "mismatch"  # a different call was recorded here: write nothing, raise


@attrs.frozen
class ToolDecision:
    action: ToolAction
    result: ToolResult | None = None
    write_intent: bool = False
    reason: str = ""


class ModelAction(enum.Enum):
    REUSE = "reuse"
    RUN = "run"
    MISMATCH = "mismatch"


@attrs.frozen
class ModelDecision:
    action: ModelAction
    response: JsonValue = None
    reason: str = ""


def decide_tool(
    view: ReplayView,
    consumed: frozenset[int],
    call: int,
    name: str,
    input_json: str,
    replay: Replay,
) -> tuple[ToolDecision, frozenset[int]]:
    """The spec's recovery rules for a tool call at position ``call``, in order:

    1. a different call recorded here in this attempt -> MISMATCH (nothing consumed or written);
    2. an unsafe start of an earlier attempt with the same name and input is honoured (consumed,
       at most once);
    3. a result recorded here in this attempt is reused, whatever the declarations say;
    4. an honoured start: its result is recorded here, or an interrupted result with its partial
       output when it has none;
    5. an intent here without a result runs again only if both declarations say safe, otherwise
       an interrupted result is recorded with the partial output written here;
    6. otherwise the call runs.
    """
    rec = view.calls.get(call)
    if isinstance(rec, RecordedModel):
        return ToolDecision(
            ToolAction.MISMATCH, reason=f"a model call is recorded at position {call}"
        ), consumed
    if isinstance(rec, RecordedTool) and (
        rec.intent.name != name or _input_json(rec.intent.input) != input_json
    ):
        return ToolDecision(
            ToolAction.MISMATCH,
            reason=(
                f"tool {rec.intent.name!r} with input {_input_json(rec.intent.input)} is "
                f"recorded at position {call}, not {name!r} with input {input_json}"
            ),
        ), consumed
    match = _first_match(view.origins, consumed, call, name, input_json, replay)
    if match is not None:
        consumed = consumed | {match}
    if rec is not None and rec.result is not None:
        return ToolDecision(ToolAction.REUSE, ToolResult.of(rec.result)), consumed
    if match is not None:
        origin = view.origins[match]
        result = (
            ToolResult.of(origin.result)
            if origin.result is not None
            else ToolResult(interrupted=True, partial=origin.partial)
        )
        return ToolDecision(ToolAction.RECORD, result, write_intent=rec is None), consumed
    if rec is not None:
        if rec.intent.replay is Replay.SAFE and replay is Replay.SAFE:
            return ToolDecision(ToolAction.RERUN), consumed
        return ToolDecision(
            ToolAction.RECORD, ToolResult(interrupted=True, partial=rec.partial)
        ), consumed
    return ToolDecision(ToolAction.RUN), consumed


@final
@attrs.frozen
class GroupMember:
    """One call of a parallel group as the rules see it."""

    name: str
    input_json: str
    replay: Replay
    call_id: str | None = None


def decide_group(
    view: ReplayView, consumed: frozenset[int], first: int, members: Sequence[GroupMember]
) -> tuple[list[ToolDecision], frozenset[int]]:
    """A parallel group is ``len(members)`` consecutive positions from ``first``: each member is
    decided at its own position by :func:`decide_tool` (so a finished call is reused, an
    unfinished unsafe one comes back interrupted, an unfinished safe one runs again, and an
    earlier attempt's unsafe start is honoured at most once). A recorded intent whose model call
    id differs from the member's (both given) is a mismatch too. On a mismatch the decisions end
    with it, at that member's index, and nothing is consumed."""
    out: list[ToolDecision] = []
    taken = consumed
    for k, m in enumerate(members):
        pos = first + k
        rec = view.calls.get(pos)
        if (
            isinstance(rec, RecordedTool)
            and rec.intent.call_id is not None
            and m.call_id is not None
            and rec.intent.call_id != m.call_id
        ):
            reason = (
                f"call id {rec.intent.call_id!r} is recorded at position {pos} (member {k} of "
                f"the group), not {m.call_id!r}"
            )
            return [*out, ToolDecision(ToolAction.MISMATCH, reason=reason)], consumed
        decision, taken = decide_tool(view, taken, pos, m.name, m.input_json, m.replay)
        if decision.action is ToolAction.MISMATCH:
            reason = f"member {k} of the group: {decision.reason}"
            return [*out, ToolDecision(ToolAction.MISMATCH, reason=reason)], consumed
        out.append(decision)
    return out, taken


def decide_model(view: ReplayView, call: int) -> ModelDecision:
    """Reuse the response this attempt recorded at ``call``; a tool there is a mismatch."""
    rec = view.calls.get(call)
    if isinstance(rec, RecordedModel):
        return ModelDecision(ModelAction.REUSE, rec.response)
    if isinstance(rec, RecordedTool):
        return ModelDecision(
            ModelAction.MISMATCH,
            reason=f"tool {rec.intent.name!r} is recorded at position {call}, not a model call",
        )
    return ModelDecision(ModelAction.RUN)


# ---------------------------------------------------------------------------------------------
# Commits and their lifecycle events.
# ---------------------------------------------------------------------------------------------


def event_for_commit(commit: CommitRecord, task: TaskIdentity, seq: int) -> LifecycleEvent:
    """The lifecycle event a commit stands for, carrying the dispatch and ``journal_seq``."""
    return lifecycle_event(
        task.run_id,
        task.step_id,
        task.dispatch,
        commit.action,
        output=commit.output,
        wait=commit.wait,
        error=commit.error,
        retriable=commit.retriable,
        reason=commit.reason,
        pause_ms=commit.pause_ms,
        journal_seq=seq,
    )


def placed_before(entries: Sequence[Entry], commit_seq: int, iteration: int) -> tuple[str, ...]:
    """Request ids placed in the segment that the commit at ``commit_seq`` ends."""
    seg: list[JournalRecord] = []
    for s, r in entries:
        if s >= commit_seq:
            break
        if r.iteration != iteration:
            continue
        if isinstance(r, CommitRecord) and r.action is CommitAction.PAUSE:
            seg = []
            continue
        seg.append(r)
    return tuple(p.request_id for p in _placed(seg))
