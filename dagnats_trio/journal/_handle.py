"""The journal handle: the I/O shell around ``_replay``.

Every write is a fenced append (expected last subject sequence = the last sequence this writer
saw). The fast path of :func:`open_journal` is one ``get_last_msg`` and one claim append; the
iteration's records are read only when the tail is not the previous iteration's commit.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeVar, final

import attrs
import trio

from dagnats_trio._env import DEFAULT_ENV, RuntimeEnv
from dagnats_trio._seams import Seam, ToolStart, tool_start_observer
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    DecodeError,
    InputPlacedRecord,
    JournalRecord,
    JsonValue,
    ModelRecord,
    Replay,
    TaskMessage,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
    Wait,
    decode_record,
    encode_record,
    record_headers,
)
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import (
    NotFound,
    StoredMsg,
    TemporarilyUnavailable,
    TransientRetry,
    Transport,
    TransportTimeout,
    WrongLastSequence,
    retry_transient,
)

from ._errors import (
    CallLimitExceeded,
    Committed,
    Fenced,
    HolderKilled,
    JournalCorrupt,
    JournalSettled,
    JournalUnreadable,
    ReplayMismatch,
    RestartLimit,
    Stale,
    ToolOutputNotJson,
)
from ._events import publish_lifecycle
from ._holder import DeliveryState, Settlement
from ._replay import (
    MAX_CALLS_PER_ITERATION,
    NOT_JSON_ERROR_PREFIX,
    RESTART_LIMIT_REASON,
    UNREADABLE_REASON,
    ClaimPlan,
    Entry,
    GroupMember,
    ModelAction,
    PlanKind,
    ReplayView,
    TailKind,
    TaskIdentity,
    ToolAction,
    ToolResult,
    call_key,
    canonical_json,
    decide_group,
    decide_model,
    decide_tool,
    empty_view,
    event_for_commit,
    judge_tail,
    placed_before,
    plan_claim,
)
from .check import Unreadable

_log = logging.getLogger(__name__)

DEFAULT_RESTART_LIMIT: Final = 5
MIN_RESTART_LIMIT: Final = 1
MAX_RESTART_LIMIT: Final = 1000
#: Records asked for per ``read_subject`` call when reading an iteration.
READ_PAGE_RECORDS: Final = 256
#: Bound on the ``on_committed`` callback; it is told, it does not decide.
ON_COMMITTED_TIMEOUT_S: Final = 10.0


def check_restart_limit(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"restart_limit must be an integer, got {value!r}")
    if not MIN_RESTART_LIMIT <= value <= MAX_RESTART_LIMIT:
        raise ValueError(
            f"restart_limit must be from {MIN_RESTART_LIMIT} to {MAX_RESTART_LIMIT}, got {value}"
        )
    return value


@final
@attrs.frozen
class ToolCall:
    """A tool call as the handler states it; the journal fills ``key`` before calling fn."""

    name: str
    input: JsonValue = None
    key: str = ""
    #: The model's id of this call, when it gives one: recorded, and matched on replay.
    call_id: str | None = None


#: A tool: ``fn(call)`` returning the output, or an awaitable of it (plain functions welcome).
ToolFn = Callable[[ToolCall], Awaitable[JsonValue] | JsonValue]
#: A model request: ``fn()`` returning the response, or an awaitable of it.
ModelFn = Callable[[], Awaitable[JsonValue] | JsonValue]


async def _call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, awaited when it returns an awaitable: ``j.model`` and ``j.tool`` accept
    plain functions as well as coroutine functions (and lambdas wrapping either)."""
    value = fn(*args)
    if inspect.isawaitable(value):
        return await value
    await trio.lowlevel.checkpoint()
    return value


@final
@attrs.frozen
class CommittedIteration:
    """Told to ``on_committed`` after a commit stores (not for failures): the request ids of the
    inputs the committed segment placed, so the inputs service can mark them done. It may be told
    twice for one commit (a crash before the lifecycle event), never zero times before the event.
    """

    run_id: str
    step_id: str
    iteration: int
    attempt: int
    action: CommitAction
    journal_seq: int
    request_ids: tuple[str, ...]


OnCommitted = Callable[[CommittedIteration], Awaitable[None]]


#: The journal and call position of the tool function running in this task (group members run
#: in tasks of their own, so ``tool_output`` finds its call without a shared attribute).
_RUNNING: contextvars.ContextVar[tuple[object, int] | None] = contextvars.ContextVar(
    "dagnats_running_tool", default=None
)

#: One ``(call, replay, fn)`` of a parallel group.
GroupCall = tuple[ToolCall, Replay, ToolFn]


class _Guard:
    """One task at a time, in the style of Trio's ``ConflictDetector``: replay matches calls by
    position, so calls from several tasks would be recorded in one order and replayed in another."""

    def __init__(self, msg: str) -> None:
        self._msg = msg
        self._held = False

    def __enter__(self) -> None:
        if self._held:
            raise trio.BusyResourceError(self._msg)
        self._held = True

    def __exit__(self, *exc: object) -> None:
        self._held = False


_UNSET: Any = object()
T = TypeVar("T")


async def _retry_transient(what: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Retry ``fn`` on no-leader / timeout with the transient backoff (reads only: idempotent)."""
    return await retry_transient(fn, lambda exc: _log.debug("%s: %s", what, exc))


def _moved_by(tail: StoredMsg | None, own_claim: str) -> str:
    """What a holder that lost the tail is told: a successor's claim, or what else is there."""
    if tail is None:
        return "its records are gone (purged?), not claimed by a successor"
    try:
        rec = decode_record(tail.data)
    except DecodeError as exc:
        return (
            f"the record at sequence {tail.seq} is not a claim but unreadable ({exc}); no "
            "successor claimed it"
        )
    if isinstance(rec, ClaimRecord):
        return f"a successor claimed it (claim {rec.claim_id} at sequence {tail.seq})"
    if rec.claim_id != own_claim:
        return f"a successor claimed it (claim {rec.claim_id} wrote sequence {tail.seq})"
    return (
        f"the {rec.TYPE!r} record at sequence {tail.seq} carries this holder's own claim but is "
        "not one it wrote: not a successor's claim"
    )


def _decode(msg: StoredMsg) -> Entry:
    try:
        return msg.seq, decode_record(msg.data)
    except DecodeError as exc:
        raise JournalCorrupt(msg.seq, str(exc)) from None


async def read_entries(
    transport: Transport, subject: str, from_seq: int, to_seq: int | None = None
) -> list[Entry]:
    """Records of ``subject`` from ``from_seq`` up to ``to_seq`` (the tail when None)."""
    if to_seq is None:
        tail = await _retry_transient(
            "tail", lambda: transport.get_last_msg(JOURNAL_STREAM, subject)
        )
        if tail is None:
            return []
        to_seq = tail.seq
    return [_decode(msg) for msg in await _read_msgs(transport, subject, from_seq, to_seq)]


async def _read_msgs(
    transport: Transport, subject: str, from_seq: int, to_seq: int
) -> list[StoredMsg]:
    out: list[StoredMsg] = []
    seq = max(from_seq, 1)
    while seq <= to_seq:
        page: list[StoredMsg] = await _retry_transient(
            "read",
            functools.partial(
                transport.read_subject, JOURNAL_STREAM, subject, seq, READ_PAGE_RECORDS
            ),
        )
        for msg in page:
            if msg.seq > to_seq:
                return out
            out.append(msg)
        if len(page) < READ_PAGE_RECORDS:
            break
        seq = page[-1].seq + 1
    return out


async def read_journal_for_audit(
    transport: Transport, run_id: str, step_id: str
) -> tuple[list[Entry], list[Unreadable]]:
    """Every record of one step's journal that decodes, and every one that does not: for the
    audit, where a bad record is a finding to report with its sequence, not the end of the read
    (:func:`read_journal` raises :class:`JournalCorrupt` at the first)."""
    subject = journal_subject(run_id, step_id)
    tail = await _retry_transient("tail", lambda: transport.get_last_msg(JOURNAL_STREAM, subject))
    if tail is None:
        return [], []
    records: list[Entry] = []
    unreadable: list[Unreadable] = []
    for msg in await _read_msgs(transport, subject, 1, tail.seq):
        try:
            records.append((msg.seq, decode_record(msg.data)))
        except DecodeError as exc:
            unreadable.append(Unreadable(msg.seq, str(exc)))
    return records, unreadable


async def read_journal(
    transport: Transport, run_id: str, step_id: str
) -> list[tuple[int, JournalRecord]]:
    """Every record of one step's journal, in order: the one reader every tool shares (never a
    consumer: one direct get per record)."""
    return await read_entries(transport, journal_subject(run_id, step_id), 1)


@final
class Journal:
    """The journal of one task delivery, after its claim. Single owner (one task at a time)."""

    def __init__(
        self,
        *,
        transport: Transport,
        task: TaskIdentity,
        holder: DeliveryState,
        claim_id: str,
        last_seq: int,
        view: ReplayView,
        on_committed: OnCommitted | None,
    ) -> None:
        self._transport = transport
        self._task = task
        self._holder = holder
        self._claim_id = claim_id
        self._last_seq = last_seq
        self._view = view
        self._on_committed = on_committed
        self._subject = journal_subject(task.run_id, task.step_id)
        self._guard = _Guard("another task is using this journal handle")
        self._lock = trio.Lock()
        self._next_call = view.call_offset
        self._consumed: frozenset[int] = frozenset()
        self._placed: list[InputPlacedRecord] = list(view.placed)
        self._chunks: dict[int, list[JsonValue]] = {}
        self._pending_state: JsonValue = _UNSET
        self._base_state: JsonValue = _UNSET
        if view.base is not None and isinstance(view.base[1], CommitRecord):
            self._base_state = view.base[1].state
        elif task.journal_seq is None:
            self._base_state = None
        self._closed = False

    # --- identity (the inputs service's JournalWriter protocol) ------------------------------

    @property
    def run_id(self) -> str:
        return self._task.run_id

    @property
    def step_id(self) -> str:
        return self._task.step_id

    @property
    def iteration(self) -> int:
        return self._task.iteration

    @property
    def attempt(self) -> int:
        return self._task.attempt

    @property
    def claim_id(self) -> str:
        return self._claim_id

    @property
    def last_seq(self) -> int:
        """The last sequence this writer saw (its claim, then each of its appends)."""
        return self._last_seq

    @property
    def next_call(self) -> int:
        """The position the next model or tool call takes."""
        return self._next_call

    def placed_inputs(self) -> list[InputPlacedRecord]:
        """input.placed records of this iteration since its last pause (all deliveries and
        attempts), then the ones this delivery appended; each request id once."""
        return list(self._placed)

    # --- state --------------------------------------------------------------------------------

    async def load_state(self) -> JsonValue:
        """The state of record: the last ``set_state`` of this delivery, else the state of the
        commit this iteration started from (one get by sequence at most, then cached)."""
        if self._pending_state is not _UNSET:
            await trio.lowlevel.checkpoint()
            return self._pending_state
        if self._base_state is _UNSET:
            self._base_state = await load_commit_state(self._transport, self._task)
        else:
            await trio.lowlevel.checkpoint()
        return self._base_state

    def set_state(self, state: JsonValue) -> None:
        """The state the next commit carries (no size cap: the journal is the state of record)."""
        _require_json("checkpoint state", state)
        self._pending_state = state

    # --- appends ------------------------------------------------------------------------------

    async def append(self, record: JournalRecord) -> int:
        """Fenced append of a record of this writer (raises :class:`Fenced` on a lost tail).

        Guarded like the calls: an append from a second task while a call runs would take a
        position out of the order replay relies on. ``place_inputs`` appends through here, so
        each of its records is guarded too.
        """
        with self._guard:
            return await self._append_checked(record)

    async def _append_checked(self, record: JournalRecord) -> int:
        t = self._task
        if (record.iteration, record.attempt) != (t.iteration, t.attempt) or (
            record.claim_id != self._claim_id
        ):
            raise ValueError(
                "a record appended through this handle must carry its iteration, attempt and "
                f"claim_id ({t.iteration}, {t.attempt}, {self._claim_id!r})"
            )
        self._check_open()
        seq = await self._append(record)
        if isinstance(record, InputPlacedRecord) and all(
            p.request_id != record.request_id for p in self._placed
        ):
            self._placed.append(record)
        return seq

    async def _append(self, record: JournalRecord) -> int:
        self._holder.check_writable()
        data = encode_record(record)
        headers = record_headers(record)
        await self._acquire_lock()
        try:
            backoff = TransientRetry()
            while True:
                self._holder.check_writable()
                try:
                    seq = await self._transport.publish(
                        self._subject,
                        data,
                        headers=headers,
                        expected_last_subject_seq=self._last_seq,
                    )
                except WrongLastSequence:
                    return await self._after_lost_tail(data)
                except (TemporarilyUnavailable, TransportTimeout):
                    if not await backoff.pause():
                        raise
                    tail = await self._tail_msg()
                    if tail is not None and tail.seq > self._last_seq:
                        # Stored before the error, or someone else wrote: never write twice.
                        return await self._after_lost_tail(data, tail)
                    continue
                self._last_seq = seq
                return seq
        finally:
            self._lock.release()

    async def _acquire_lock(self) -> None:
        """``await self._lock.acquire()`` without its scheduler pass when the lock is free.

        ``trio.Lock.acquire`` raises if cancelled, then yields to the scheduler even when the
        lock was free. The cancellation check is kept (a cancelled writer still writes nothing),
        and the yield is left out: the append that follows waits on the server anyway. Taking
        the lock only when no task is queued for it keeps ``trio.Lock``'s first-come order.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    async def _after_lost_tail(self, data: bytes, tail: StoredMsg | None = None) -> int:
        """A lost publish ack whose record stored is not fencing: the tail is our own record."""
        if tail is None:
            tail = await self._tail_msg()
        if tail is not None and tail.seq > self._last_seq and tail.data == data:
            self._last_seq = tail.seq
            return tail.seq
        why = self._moved(tail)
        self._holder.fence(why)
        raise Fenced(f"{why}, so this holder stops writing")

    def _moved(self, tail: StoredMsg | None) -> str:
        moved_by = _moved_by(tail, self._claim_id)
        return f"journal {self._subject} moved past sequence {self._last_seq}: {moved_by}"

    async def _tail_msg(self) -> StoredMsg | None:
        result: StoredMsg | None = await _retry_transient(
            "tail", lambda: self._transport.get_last_msg(JOURNAL_STREAM, self._subject)
        )
        return result

    async def _check_tail(self) -> None:
        """Read the tail before spending a model request: a fenced holder spends nothing."""
        tail = await self._tail_msg()
        if tail is None or tail.seq != self._last_seq:
            why = self._moved(tail)
            self._holder.fence(why)
            raise Fenced(why)

    def _check_open(self) -> None:
        self._holder.check_writable()
        if self._closed:
            raise RuntimeError("this iteration is committed: the journal handle is closed")

    def _position(self) -> int:
        pos = self._next_call
        if pos >= MAX_CALLS_PER_ITERATION:
            raise CallLimitExceeded(
                f"an iteration may make at most {MAX_CALLS_PER_ITERATION} model and tool calls; "
                "a step that needs more has outgrown a per-step journal"
            )
        return pos

    # --- calls --------------------------------------------------------------------------------

    async def model(self, fn: ModelFn) -> JsonValue:
        """The response this attempt recorded at this position, else a new request, recorded.

        A failed request records nothing and does not use up the position.
        """
        with self._guard:
            self._check_open()
            pos = self._position()
            decision = decide_model(self._view, pos)
            if decision.action is ModelAction.MISMATCH:
                raise ReplayMismatch(decision.reason)
            if decision.action is ModelAction.REUSE:
                # Replay does no I/O; without this a replay of many calls would never yield.
                await trio.lowlevel.checkpoint()
                self._next_call = pos + 1
                return decision.response
            await self._check_tail()
            response = await _call_maybe_async(fn)
            _require_json("model response", response)
            t = self._task
            await self._append(ModelRecord(t.iteration, t.attempt, self._claim_id, pos, response))
            self._next_call = pos + 1
            return response

    async def tool(self, call: ToolCall, replay: Replay, fn: ToolFn) -> ToolResult:
        """Run a tool call durably: intent before ``fn``, result after; see ``decide_tool``.

        The tool's own exception is its result's ``error``. Output that is not JSON is recorded
        as an error result and raised as :class:`ToolOutputNotJson` (on replay too).
        """
        if not isinstance(replay, Replay):
            raise TypeError(f"replay must be Replay.SAFE or Replay.UNSAFE, got {replay!r}")
        if not isinstance(call, ToolCall) or not isinstance(call.name, str) or not call.name:
            raise TypeError(f"call must be a ToolCall with a non-empty name, got {call!r}")
        with self._guard:
            self._check_open()
            input_json = _require_json("tool input", call.input)
            pos = self._position()
            decision, consumed = decide_tool(
                self._view, self._consumed, pos, call.name, input_json, replay
            )
            if decision.action is ToolAction.MISMATCH:
                raise ReplayMismatch(decision.reason)
            if decision.action is ToolAction.REUSE:
                await trio.lowlevel.checkpoint()  # as in model(): a reuse does no I/O
            self._consumed = consumed
            self._next_call = pos + 1
            t = self._task
            key = call_key(t.run_id, t.step_id, t.iteration, pos)
            intent = ToolIntentRecord(
                t.iteration,
                t.attempt,
                self._claim_id,
                pos,
                call.name,
                call.input,
                replay,
                key,
                call_id=call.call_id,
            )
            if decision.action is ToolAction.REUSE:
                assert decision.result is not None
                return _raise_if_not_json(decision.result)
            if decision.action is ToolAction.RECORD:
                assert decision.result is not None
                if decision.write_intent:
                    await self._append(intent)
                await self._record_result(pos, decision.result)
                return _raise_if_not_json(decision.result)
            if decision.action is ToolAction.RUN:
                await self._append(intent)
                await self._holder.seam(Seam.AFTER_TOOL_INTENT)
            result = await self._run_tool(pos, attrs.evolve(call, key=key), fn, replay)
            await self._record_result(pos, result)
            return _raise_if_not_json(result)

    async def tools(
        self, calls: Sequence[GroupCall], *, cancel_on_error: bool = False
    ) -> list[ToolResult]:
        """Run a group of tool calls at once, each still at most once (the model's parallel tool
        calls). Returns their results in the order of ``calls``.

        The group takes ``len(calls)`` consecutive positions. Every intent is recorded before
        any function starts (fenced appends, one after the other: the transports have no atomic
        batch); then the functions run in a nursery, each result recorded as it finishes, in
        completion order. Replay matches each member by its position in the group and its name
        and input (and the model's call id when both have one): see ``decide_group``. With
        ``cancel_on_error``, the first member whose function raises cancels the ones still
        running; each is recorded as an interrupted result naming that member in
        ``cancelled_by``. A member whose output is not JSON gets an error result (the group does
        not raise for it). The handle's guard is held for the whole group; members write
        through it.
        """
        members = [_check_call(c) for c in calls]
        with self._guard:
            self._check_open()
            n = len(members)
            first = self._position()
            if first + n > MAX_CALLS_PER_ITERATION:
                raise CallLimitExceeded(
                    f"a group of {n} calls from position {first} passes the limit of "
                    f"{MAX_CALLS_PER_ITERATION} calls per iteration"
                )
            rules = [
                GroupMember(c.name, _require_json("tool input", c.input), r, c.call_id)
                for c, r, _ in members
            ]
            decisions, consumed = decide_group(self._view, self._consumed, first, rules)
            if decisions and decisions[-1].action is ToolAction.MISMATCH:
                raise ReplayMismatch(decisions[-1].reason)
            self._consumed = consumed
            self._next_call = first + n
            t = self._task
            keys = [call_key(t.run_id, t.step_id, t.iteration, first + k) for k in range(n)]
            # 1. Every intent the group needs, before any function starts.
            for k, d in enumerate(decisions):
                if d.action is ToolAction.RUN or (d.action is ToolAction.RECORD and d.write_intent):
                    call, replay, _ = members[k]
                    await self._append(
                        ToolIntentRecord(
                            t.iteration,
                            t.attempt,
                            self._claim_id,
                            first + k,
                            call.name,
                            call.input,
                            replay,
                            keys[k],
                            group=first,
                            group_size=n,
                            call_id=call.call_id,
                        )
                    )
                    await self._holder.seam(Seam.AFTER_TOOL_INTENT)
            # 2. What the journal answers: finished calls, honoured starts, interruptions.
            results: list[ToolResult | None] = [None] * n
            for k, d in enumerate(decisions):
                if d.action is ToolAction.REUSE:
                    results[k] = d.result
                elif d.action is ToolAction.RECORD:
                    assert d.result is not None
                    await self._record_result(first + k, d.result)
                    results[k] = d.result
            # 3. The rest run at once.
            to_run = [k for k, d in enumerate(decisions) if results[k] is None]
            if not to_run:
                await trio.lowlevel.checkpoint()
            else:
                await self._run_group(first, members, keys, to_run, results, cancel_on_error)
            done = [r for r in results if r is not None]
            assert len(done) == n
            return done

    async def _run_group(
        self,
        first: int,
        members: list[GroupCall],
        keys: list[str],
        to_run: list[int],
        results: list[ToolResult | None],
        cancel_on_error: bool,
    ) -> None:
        scopes = {k: trio.CancelScope() for k in to_run}
        failed: list[int] = []

        async def member(k: int) -> None:
            call, replay, fn = members[k]
            pos = first + k
            result: ToolResult | None = None
            with scopes[k]:
                result = await self._run_tool(pos, attrs.evolve(call, key=keys[k]), fn, replay)
            if result is None:  # cancelled because another member failed
                cause = failed[0]
                result = ToolResult(
                    error=f"cancelled: call {cause} of the group failed",
                    interrupted=True,
                    partial=tuple(self._chunks.get(pos, ())),
                    cancelled_by=cause,
                )
            await self._record_result(pos, result)
            results[k] = result
            first_failure = result.error is not None and result.cancelled_by is None and not failed
            if cancel_on_error and first_failure:
                failed.append(pos)
                for other, scope in scopes.items():
                    if other != k and results[other] is None:
                        scope.cancel()

        try:
            async with trio.open_nursery() as nursery:
                for k in to_run:
                    nursery.start_soon(member, k)
        except BaseExceptionGroup as group:
            raise _leaf(group) from None

    async def _run_tool(self, pos: int, call: ToolCall, fn: ToolFn, replay: Replay) -> ToolResult:
        self._holder.check_writable()
        observer = tool_start_observer()
        if observer is not None:
            t = self._task
            observer(
                ToolStart(
                    t.run_id,
                    t.step_id,
                    t.iteration,
                    t.attempt,
                    pos,
                    call.name,
                    replay is Replay.UNSAFE,
                    self._holder.worker_id,
                )
            )
        token = _RUNNING.set((self, pos))
        try:
            output = await _call_maybe_async(fn, call)
        except (JournalSettled, HolderKilled):
            raise
        except Exception as exc:
            result = ToolResult(error=f"{type(exc).__name__}: {exc}")
        else:
            result = _tool_result(output)
        finally:
            _RUNNING.reset(token)
        # The tool has run and its effect has happened, but its result is not recorded: the
        # crash a successor can only see as an intent without a result.
        await self._holder.seam(Seam.INSIDE_TOOL)
        return result

    async def _record_result(self, pos: int, result: ToolResult) -> None:
        t = self._task
        await self._append(
            ToolResultRecord(
                t.iteration,
                t.attempt,
                self._claim_id,
                pos,
                output=result.output,
                error=result.error,
                interrupted=result.interrupted,
                partial=list(result.partial),
                cancelled_by=result.cancelled_by,
            )
        )
        await self._holder.seam(Seam.AFTER_TOOL_RESULT)

    async def tool_output(self, chunk: JsonValue) -> None:
        """Record partial output of the tool function now running (a ``tool.output`` record);
        an interrupted result carries it to the model.

        Not guarded, on purpose: it is only valid while a tool function runs, and that function
        runs inside :meth:`tool`, which holds the guard. The chunks carry the running call's
        position, not one of their own, so their order is not part of replay; the handle's
        lock still writes them one at a time, in the order they come.
        """
        running = _RUNNING.get()
        if running is None or running[0] is not self:
            raise RuntimeError("tool_output is only valid while a tool function runs")
        pos = running[1]
        _require_json("tool output chunk", chunk)
        t = self._task
        await self._append(ToolOutputRecord(t.iteration, t.attempt, self._claim_id, pos, chunk))
        self._chunks.setdefault(pos, []).append(chunk)

    # --- commit -------------------------------------------------------------------------------

    async def settle(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        reason: str | None = None,
        pause_ms: int | None = None,
    ) -> int:
        """Commit the iteration (action, state, output, wait, ...), then publish the lifecycle
        event with the commit's sequence as ``journal_seq``. Returns that sequence."""
        with self._guard:
            self._check_open()
            _require_json("step output", output)
            return await self._settle(
                action,
                output=output,
                wait=wait,
                error=error,
                retriable=retriable,
                reason=reason,
                pause_ms=pause_ms,
            )

    async def _settle(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        reason: str | None = None,
        pause_ms: int | None = None,
    ) -> int:
        t = self._task
        state = await self.load_state()
        commit = CommitRecord(
            t.iteration,
            t.attempt,
            self._claim_id,
            t.nonce,
            action,
            state=state,
            output=output,
            wait=wait,
            error=error,
            retriable=retriable,
            reason=reason,
            pause_ms=pause_ms,
        )
        seq = await self._append(commit)
        self._closed = True
        await self._holder.seam(Seam.AFTER_COMMIT)
        if action is not CommitAction.FAIL:
            ids = tuple(p.request_id for p in self._placed)
            await _notify(self._on_committed, t, commit, seq, ids)
        await publish_lifecycle(self._transport, event_for_commit(commit, t, seq))
        self._holder.settlement = Settlement.ACK
        await self._holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
        return seq


def _check_call(item: GroupCall) -> GroupCall:
    """One ``(call, replay, fn)`` of a group, checked as :meth:`Journal.tool` checks its
    arguments."""
    if not isinstance(item, tuple) or len(item) != 3:
        raise TypeError(f"a group member must be a (call, replay, fn) tuple, got {item!r}")
    call, replay, fn = item
    if not isinstance(replay, Replay):
        raise TypeError(f"replay must be Replay.SAFE or Replay.UNSAFE, got {replay!r}")
    if not isinstance(call, ToolCall) or not isinstance(call.name, str) or not call.name:
        raise TypeError(f"call must be a ToolCall with a non-empty name, got {call!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    return item


def _leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a group of members stands for: a kill or a settlement first (the
    holder stops as if it had run one call), then any other error, then a cancellation."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    for kinds in ((HolderKilled,), (JournalSettled,)):
        for leaf in leaves:
            if isinstance(leaf, kinds):
                return leaf
    for leaf in leaves:
        if not isinstance(leaf, trio.Cancelled):
            return leaf
    return leaves[0]


def _require_json(what: str, value: JsonValue) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} is not a JSON value: {exc}") from None


def _tool_result(output: JsonValue) -> ToolResult:
    """A tool function's output as its result: an error result when it is not JSON."""
    try:
        canonical_json(output)
    except (TypeError, ValueError) as exc:
        return ToolResult(error=f"{NOT_JSON_ERROR_PREFIX}{exc}")
    return ToolResult(output=output)


def _raise_if_not_json(result: ToolResult) -> ToolResult:
    if result.error is not None and result.error.startswith(NOT_JSON_ERROR_PREFIX):
        raise ToolOutputNotJson(result.error)
    return result


async def _notify(
    on_committed: OnCommitted | None,
    t: TaskIdentity,
    commit: CommitRecord,
    seq: int,
    ids: tuple[str, ...],
) -> None:
    if on_committed is None:
        return
    info = CommittedIteration(t.run_id, t.step_id, t.iteration, t.attempt, commit.action, seq, ids)
    try:
        with trio.fail_after(ON_COMMITTED_TIMEOUT_S):
            await on_committed(info)
    except Exception:
        _log.exception(
            "on_committed failed for %s.%s iteration %d", info.run_id, info.step_id, info.iteration
        )


async def load_commit_state(transport: Transport, task: TaskIdentity) -> JsonValue:
    """The state carried by the commit at the task's ``journal_seq`` (None when it has none)."""
    if task.journal_seq is None:
        return None
    try:
        msg: StoredMsg = await _retry_transient(
            "state", lambda: transport.get_msg(JOURNAL_STREAM, task.journal_seq or 0)
        )
    except NotFound:
        raise JournalCorrupt(
            task.journal_seq, "the commit this task names is missing (purged or expired?)"
        ) from None
    seq, rec = _decode(msg)
    if not isinstance(rec, CommitRecord):
        raise JournalCorrupt(seq, f"expected a commit record, found {rec.TYPE!r}")
    return rec.state


async def open_journal(
    transport: Transport,
    task: TaskMessage,
    *,
    holder: DeliveryState | None = None,
    restart_limit: int = DEFAULT_RESTART_LIMIT,
    env: RuntimeEnv = DEFAULT_ENV,
    on_committed: OnCommitted | None = None,
) -> Journal:
    """Claim the journal of ``task``: what ``await tc.journal()`` does.

    Raises :class:`Stale` (late redelivery), :class:`Committed` (this dispatch committed: its
    event was published again), :class:`RestartLimit` (failure committed and published) or
    :class:`Fenced` (a successor claimed first) or :class:`JournalUnreadable` (a record cannot be
    decoded: this attempt's failure was committed and published); ``holder.settlement`` says
    what to do then.
    """
    check_restart_limit(restart_limit)
    ident = TaskIdentity.of(task)
    if holder is None:
        holder = DeliveryState(ident)
    holder.check_writable()
    subject = journal_subject(ident.run_id, ident.step_id)
    tail_msg: StoredMsg | None = await _retry_transient(
        "tail", lambda: transport.get_last_msg(JOURNAL_STREAM, subject)
    )
    try:
        tail, plan = await _plan(transport, ident, holder, tail_msg, restart_limit, on_committed)
    except JournalCorrupt as exc:
        assert tail_msg is not None  # an unreadable record means there is a tail
        await _fail_unreadable(transport, ident, holder, tail_msg.seq, exc, env, on_committed)
        raise JournalUnreadable(str(exc)) from exc
    assert plan.view is not None
    await holder.seam(Seam.BEFORE_CLAIM)
    journal = Journal(
        transport=transport,
        task=ident,
        holder=holder,
        claim_id=env.new_id(),
        last_seq=tail[0] if tail is not None else 0,
        view=plan.view,
        on_committed=on_committed,
    )
    await journal._append(
        ClaimRecord(ident.iteration, ident.attempt, journal.claim_id, ident.nonce)
    )
    await holder.seam(Seam.AFTER_CLAIM)
    if plan.restart_limit:
        await journal._settle(
            CommitAction.FAIL,
            error=(
                f"claimed {restart_limit} times in a row without progress "
                f"(restart_limit {restart_limit})"
            ),
            retriable=True,
            reason=RESTART_LIMIT_REASON,
        )
        raise RestartLimit(f"restart limit {restart_limit} reached at iteration {ident.iteration}")
    return journal


async def _plan(
    transport: Transport,
    ident: TaskIdentity,
    holder: DeliveryState,
    tail_msg: StoredMsg | None,
    restart_limit: int,
    on_committed: OnCommitted | None,
) -> tuple[Entry | None, ClaimPlan]:
    """Read what the claim needs and plan it. Raises :class:`JournalCorrupt` on a record that
    cannot be decoded, and the settled errors of :func:`open_journal`."""
    subject = journal_subject(ident.run_id, ident.step_id)
    tail = _decode(tail_msg) if tail_msg is not None else None
    verdict = judge_tail(tail, ident)
    plan: ClaimPlan
    if verdict.kind is TailKind.STALE:
        holder.settlement = Settlement.ACK
        raise Stale(verdict.reason)
    if verdict.kind is TailKind.COMMITTED:
        assert tail is not None
        await _republish(transport, ident, holder, tail, on_committed)
    if verdict.kind is TailKind.EMPTY:
        plan = ClaimPlan(PlanKind.PROCEED, view=empty_view(ident))
    elif verdict.kind is TailKind.BASE:
        plan = ClaimPlan(PlanKind.PROCEED, view=empty_view(ident, base=tail))
    else:
        assert tail is not None
        entries = await read_entries(transport, subject, verdict.read_from, tail[0])
        plan = plan_claim(entries, ident, restart_limit, full=verdict.read_from <= 1)
        if plan.kind is PlanKind.NEED_FULL_READ:
            entries = await read_entries(transport, subject, 1, tail[0])
            plan = plan_claim(entries, ident, restart_limit, full=True)
        if plan.kind is PlanKind.STALE:
            holder.settlement = Settlement.ACK
            raise Stale(plan.reason)
        if plan.kind is PlanKind.COMMITTED:
            await _republish(transport, ident, holder, tail, on_committed)
        if plan.kind is PlanKind.ADOPT:
            assert plan.commit is not None
            await _republish(transport, ident, holder, plan.commit, on_committed)
    return tail, plan


async def _fail_unreadable(
    transport: Transport,
    ident: TaskIdentity,
    holder: DeliveryState,
    tail_seq: int,
    exc: JournalCorrupt,
    env: RuntimeEnv,
    on_committed: OnCommitted | None,
) -> None:
    """Fail this attempt after an unreadable record: a claim and a retriable failure appended
    after the tail (fenced on it, like any claim), and its ``step.failed`` event published.

    Nothing is replayed and nothing runs: a journal no holder can read cannot say which unsafe
    tools were started, so none may start again. The commit carries no state (the state of
    record may be what is unreadable); a later attempt starts from its base commit again, reads
    the same record and fails the same way, so the step's retry policy ends it.
    """
    _log.error(
        "%s.%s iteration %d attempt %d failed: %s",
        ident.run_id,
        ident.step_id,
        ident.iteration,
        ident.attempt,
        exc,
    )
    journal = Journal(
        transport=transport,
        task=ident,
        holder=holder,
        claim_id=env.new_id(),
        last_seq=tail_seq,
        view=empty_view(ident),
        on_committed=on_committed,
    )
    journal.set_state(None)
    await journal._append(
        ClaimRecord(ident.iteration, ident.attempt, journal.claim_id, ident.nonce)
    )
    await journal._settle(
        CommitAction.FAIL, error=str(exc), retriable=True, reason=UNREADABLE_REASON
    )


async def _republish(
    transport: Transport,
    ident: TaskIdentity,
    holder: DeliveryState,
    tail: Entry,
    on_committed: OnCommitted | None,
) -> None:
    """This dispatch committed and crashed before (or while) publishing, or an earlier attempt
    ended the iteration after the engine moved on (``ADOPT``): publish the commit's event under
    this dispatch's identity."""
    seq, commit = tail
    assert isinstance(commit, CommitRecord)
    if on_committed is not None and commit.action is not CommitAction.FAIL:
        entries = await read_entries(
            transport, journal_subject(ident.run_id, ident.step_id), ident.journal_seq or 1, seq
        )
        ids = placed_before(entries, seq, ident.iteration)
        await _notify(on_committed, ident, commit, seq, ids)
    await publish_lifecycle(transport, event_for_commit(commit, ident, seq))
    holder.settlement = Settlement.ACK
    await holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
    raise Committed(f"iteration {ident.iteration} was committed at sequence {seq}; event resent")
