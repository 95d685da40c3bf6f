"""``Bridge``: task deliveries leased to HTTP clients, settled with the Python SDK's fencing.

A lease is one delivery from the durable consumer ``workers-{task_type}`` (the one Python workers
of that type share), held for a client that keeps heart-beating. Everything that decides what a
delivery may still do is the same code the Python worker runs: :func:`open_journal` claims,
:meth:`Journal.append` and :meth:`Journal.settle` write fenced, the :class:`DeliveryState` flags say
whether to ack. The bridge only adds the lease table, its bounds and the translation of outcomes
into answers a client in any language can act on.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, final

import attrs
import trio

from .._env import DEFAULT_ENV, RuntimeEnv
from ..inputs import InputsService, Mode, PlacementState, place_inputs
from ..journal import (
    DEFAULT_RESTART_LIMIT,
    Committed,
    CommittedIteration,
    DeliveryState,
    Fenced,
    Journal,
    JournalCorrupt,
    JournalUnreadable,
    RestartLimit,
    Settlement,
    SettleRequest,
    Stale,
    TaskIdentity,
    check_restart_limit,
    load_commit_state,
    open_journal,
    settle_delivery,
)
from ..protocol import (
    CommitAction,
    DecodeError,
    InvalidId,
    JournalRecord,
    JsonPolicyError,
    JsonValue,
    ModelRecord,
    RunStatus,
    TaskMessage,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
    Wait,
    check_id,
    converter,
    decode_json,
    decode_record,
    decode_run_header,
    decode_task,
    encode_json,
    from_obj,
)
from ..protocol.layout import (
    CHECKPOINTS_BUCKET,
    JOURNAL_STREAM,
    RUNS_BUCKET,
    TASK_STREAM,
    cancel_subject,
    checkpoint_key,
    journal_subject,
    run_key,
    worker_durable,
)
from ..transport import (
    CoreMsg,
    Delivery,
    NotProvisioned,
    Transport,
    TransportError,
)
from ..worker import DEFAULT_ACK_WAIT_S, MAX_WAIT_MS, heartbeat_interval_s, task_consumer
from ._errors import BridgeError, bad_request, cancelled, fenced, gone, lease_not_found
from ._views import (
    Appended,
    BridgeJournalEntry,
    CheckpointSaved,
    CheckpointState,
    ClaimedJournal,
    HeartbeatView,
    LeaseView,
    PlacedInputs,
    PlacedInputView,
    Settled,
)

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long a client may go without a request before its lease expires (``ack_wait_ms``). The
#: bridge itself keeps the delivery's much shorter AckWait extended meanwhile.
DEFAULT_CLIENT_ACK_WAIT_S: Final = 30.0
#: Most leases held at once (live, and finished ones kept to answer late requests).
DEFAULT_MAX_LEASES: Final = 1024
#: Longest a poll may wait for a task.
MAX_POLL_WAIT_S: Final = 30.0
#: One fetch waits at most this long, so polls of one task type take turns on the consumer.
POLL_FETCH_SLICE_S: Final = 1.0
#: Shortest fetch: a poll with ``wait=0`` still asks the server once.
POLL_MIN_FETCH_S: Final = 0.1
#: Longest a request waits for another request of the same lease to finish.
LEASE_LOCK_WAIT_S: Final = 15.0
#: A lease is kept this many AckWaits after the client's last request, so a client that comes
#: back late is told ``fenced`` or ``lease_expired`` rather than ``lease_not_found``.
LEASE_KEEP_ACK_WAITS: Final = 10
#: Most records ``journal/read`` returns at once.
JOURNAL_READ_MAX_RECORDS: Final = 4096
#: Records asked for per read of the journal subject.
JOURNAL_READ_PAGE_RECORDS: Final = 256
#: Bytes of the random part of a lease token.
LEASE_TOKEN_BYTES: Final = 24
CANCEL_SUBJECTS: Final = cancel_subject("*")
#: Latest ``until_ms`` accepted (the last millisecond of the year 9999).
MAX_UNTIL_MS: Final = 253_402_300_799_999

#: The records a client appends itself; claims and commits are the bridge's.
APPENDABLE: Final[dict[str, Any]] = {
    cls.TYPE: cls for cls in (ModelRecord, ToolIntentRecord, ToolOutputRecord, ToolResultRecord)
}
#: Filled by the bridge; a body naming them is refused so nobody thinks they are honoured.
FILLED_FIELDS: Final = ("iteration", "attempt", "claim_id")


@final
@attrs.define(eq=False)
class Lease:
    """One delivery held for a client. ``lapsed``: the client went quiet for longer than the
    AckWait, so the bridge stopped extending it and the task is left for redelivery; it never
    revives. ``finished`` is the answer (status, code, message) every later request gets once
    the task was settled for this lease."""

    token: str
    task_type: str
    task: TaskMessage
    delivery: Delivery
    holder: DeliveryState
    last_contact: float
    journal: Journal | None = None
    journal_wanted: bool = False
    state_set: bool = False
    lapsed: bool = False
    finished: tuple[int, str, str] | None = None
    placement: PlacementState = attrs.field(factory=PlacementState)
    lock: trio.Lock = attrs.field(factory=trio.Lock)

    @property
    def inactive(self) -> bool:
        h = self.holder
        return self.lapsed or self.finished is not None or h.fenced or h.cancelled or h.killed


def _positive_seconds(name: str, value: float) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


@final
class Bridge:
    """Leases tasks to HTTP clients. Mount it with ``create_app(..., bridge=bridge)`` and start
    its background part with ``await nursery.start(bridge.run)`` (it extends the AckWait of
    every lease whose client keeps heart-beating and listens for run cancellations).

    ``ack_wait_s`` is how long a client may stay quiet before its lease expires (told to it as
    ``ack_wait_ms``). ``task_ack_wait_s`` is the AckWait of the ``workers-{task_type}``
    consumers, which the bridge extends in the background while the client is alive: use the
    value the Python workers of the same task types use, since they share the consumer. A
    bridge process that dies leaves its tasks to be taken over after that short AckWait.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        env: RuntimeEnv = DEFAULT_ENV,
        restart_limit: int = DEFAULT_RESTART_LIMIT,
        ack_wait_s: float = DEFAULT_CLIENT_ACK_WAIT_S,
        task_ack_wait_s: float = DEFAULT_ACK_WAIT_S,
        max_leases: int = DEFAULT_MAX_LEASES,
        max_poll_wait_s: float = MAX_POLL_WAIT_S,
        inputs: InputsService | None = None,
        bridge_id: str | None = None,
    ) -> None:
        if isinstance(max_leases, bool) or not isinstance(max_leases, int) or max_leases < 1:
            raise ValueError(f"max_leases must be an integer >= 1, got {max_leases!r}")
        self._transport = transport
        self._env = env
        self._restart_limit = check_restart_limit(restart_limit)
        self._ack_wait_s = _positive_seconds("ack_wait_s", ack_wait_s)
        self._task_ack_wait_s = _positive_seconds("task_ack_wait_s", task_ack_wait_s)
        self._max_poll_wait_s = min(_positive_seconds("max_poll_wait_s", max_poll_wait_s), 3600.0)
        self._max_leases = max_leases
        self._keep_s = self._ack_wait_s * LEASE_KEEP_ACK_WAITS
        self._inputs = inputs
        self._bridge_id = bridge_id if bridge_id is not None else f"bridge-{env.new_id()}"
        self._leases: dict[str, Lease] = {}
        self._reserved = 0
        self._consumers: set[str] = set()
        self._fetch_locks: dict[str, trio.Lock] = {}
        self._running = False

    @property
    def ack_wait_s(self) -> float:
        return self._ack_wait_s

    @property
    def task_ack_wait_s(self) -> float:
        return self._task_ack_wait_s

    @property
    def lease_count(self) -> int:
        return len(self._leases)

    # --- background ---------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Extend the AckWait of live leases, drop old ones, listen for cancellations."""
        async with (
            self._transport.subscribe(CANCEL_SUBJECTS) as cancels,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(self._listen_for_cancels, cancels)
            nursery.start_soon(self._keep_alive)
            self._running = True
            try:
                task_status.started()
                await trio.sleep_forever()
            finally:
                self._running = False

    async def _listen_for_cancels(self, cancels: AsyncIterator[CoreMsg]) -> None:
        async for msg in cancels:
            run_id = msg.subject.partition(".")[2]
            for lease in list(self._leases.values()):
                if lease.task.run_id == run_id and not lease.inactive:
                    lease.holder.cancel()
                    await self._ack(lease)

    async def _keep_alive(self) -> None:
        interval = heartbeat_interval_s(self._task_ack_wait_s)
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            for token, lease in list(self._leases.items()):
                quiet = now - lease.last_contact
                if quiet > self._keep_s:
                    self._leases.pop(token, None)
                    continue
                if lease.inactive or lease.holder.stalled:
                    continue
                if quiet > self._ack_wait_s:
                    lease.lapsed = True
                    _log.info(
                        "lease of %s.%s lapsed (no request for %.1f s); left for redelivery",
                        lease.task.run_id,
                        lease.task.step_id,
                        quiet,
                    )
                    continue
                try:
                    await lease.delivery.in_progress()
                except TransportError as exc:
                    _log.debug("in_progress for %s failed: %s", lease.delivery.subject, exc)

    # --- poll ---------------------------------------------------------------------------------

    async def poll(self, task_type: str, wait_s: float) -> LeaseView | None:
        """Lease the next task of ``task_type``, waiting up to ``wait_s`` (cut to the bridge's
        maximum); None when there was none."""
        if not self._running:
            raise BridgeError(503, "bridge_not_running", "the bridge is not running")
        try:
            check_id("task_type", task_type)
        except InvalidId as exc:
            raise bad_request(str(exc), exc.code) from None
        wait_s = min(max(wait_s, 0.0), self._max_poll_wait_s)
        self._reserve()
        try:
            return await self._poll(task_type, wait_s)
        finally:
            self._reserved -= 1

    def _reserve(self) -> None:
        if len(self._leases) + self._reserved >= self._max_leases:
            done = sorted(
                (lease for lease in self._leases.values() if lease.inactive),
                key=lambda lease: lease.last_contact,
            )
            excess = len(self._leases) + self._reserved - self._max_leases + 1
            for lease in done[:excess]:
                self._leases.pop(lease.token, None)
        if len(self._leases) + self._reserved >= self._max_leases:
            raise BridgeError(
                503,
                "too_many_leases",
                f"the bridge holds its maximum of {self._max_leases} leases; try again later",
            )
        self._reserved += 1

    async def _poll(self, task_type: str, wait_s: float) -> LeaseView | None:
        durable = worker_durable(task_type)
        if task_type not in self._consumers:
            await self._transport.ensure_consumer(task_consumer(task_type, self._task_ack_wait_s))
            self._consumers.add(task_type)
        now = trio.current_time()
        deadline = now + wait_s
        lock = self._fetch_locks.setdefault(task_type, trio.Lock())
        with trio.move_on_at(max(deadline, now + POLL_MIN_FETCH_S)):
            await lock.acquire()
        if not lock.locked() or lock.statistics().owner is not trio.lowlevel.current_task():
            return None
        try:
            while True:
                remaining = deadline - trio.current_time()
                timeout = min(max(remaining, POLL_MIN_FETCH_S), POLL_FETCH_SLICE_S)
                for delivery in await self._transport.fetch(TASK_STREAM, durable, 1, timeout):
                    lease = await self._lease(task_type, delivery)
                    if lease is not None:
                        return self._view(lease)
                if trio.current_time() >= deadline:
                    return None
        finally:
            lock.release()

    async def _lease(self, task_type: str, delivery: Delivery) -> Lease | None:
        try:
            task = decode_task(delivery.data)
        except DecodeError as exc:
            _log.error("dropping an unreadable task message on %s: %s", delivery.subject, exc)
            await delivery.term()
            return None
        token = secrets.token_urlsafe(LEASE_TOKEN_BYTES)
        holder = DeliveryState(TaskIdentity.of(task), worker_id=self._bridge_id)
        lease = Lease(token, task_type, task, delivery, holder, trio.current_time())
        self._leases[token] = lease
        return lease

    def _view(self, lease: Lease) -> LeaseView:
        t = lease.task
        d = t.dispatch
        return LeaseView(
            token=lease.token,
            task_type=lease.task_type,
            run_id=t.run_id,
            step_id=t.step_id,
            workflow=t.workflow,
            iteration=d.iteration,
            attempt=d.attempt,
            nonce=d.nonce,
            input=t.input,
            journal_seq=t.journal_seq,
            is_loop=t.is_loop,
            loop_state_max_bytes=t.loop_state_max_bytes,
            num_delivered=lease.delivery.num_delivered,
            ack_wait_ms=round(self._ack_wait_s * 1000),
        )

    # --- using a lease ------------------------------------------------------------------------

    @asynccontextmanager
    async def _use(self, token: str) -> AsyncIterator[Lease]:
        """The lease, one request at a time; any request counts as contact unless it lapsed."""
        lease = self._leases.get(token)
        if lease is None:
            raise lease_not_found(token)
        with trio.move_on_after(LEASE_LOCK_WAIT_S):
            await lease.lock.acquire()
        if lease.lock.statistics().owner is not trio.lowlevel.current_task():
            raise BridgeError(
                409, "lease_busy", "another request of this lease is still running; retry"
            )
        try:
            now = trio.current_time()
            if not lease.lapsed and now - lease.last_contact > self._ack_wait_s:
                lease.lapsed = True
            if not lease.lapsed:
                lease.last_contact = now
            yield lease
        finally:
            lease.lock.release()

    def _check_active(self, lease: Lease) -> None:
        h = lease.holder
        if h.fenced:
            raise fenced("a successor claimed this task's journal; this lease writes nothing more")
        if h.cancelled:
            raise cancelled(lease.task.run_id)
        if lease.finished is not None:
            raise BridgeError(*lease.finished)
        if h.killed:
            raise gone("killed", "this lease was killed at a crash seam")
        if lease.lapsed and lease.journal is None:
            raise gone(
                "lease_expired",
                "no request came within the AckWait, so the task was left for redelivery",
            )

    async def _ack(self, lease: Lease) -> None:
        try:
            await lease.delivery.ack_nowait()
        except TransportError as exc:
            _log.warning("ack of %s failed: %s", lease.delivery.subject, exc)

    async def _finish(self, lease: Lease, status: int, code: str, message: str) -> BridgeError:
        """Settled for this lease (stale, committed, restart limit, settled): ack, remember."""
        lease.finished = (status, code, message)
        if lease.holder.settlement is Settlement.ACK:
            await self._ack(lease)
        return BridgeError(status, code, message)

    async def _journal_call(self, lease: Lease, fn: Callable[[], Awaitable[T]]) -> T:
        """Run a journal operation; its settling exceptions become the bridge's answers."""
        try:
            return await fn()
        except Fenced as exc:
            raise fenced(str(exc)) from None
        except Stale as exc:
            raise await self._finish(lease, 410, "stale", str(exc)) from None
        except Committed as exc:
            raise await self._finish(lease, 410, "committed", str(exc)) from None
        except RestartLimit as exc:
            raise await self._finish(lease, 410, "restart_limit", str(exc)) from None
        except JournalUnreadable as exc:
            raise await self._finish(lease, 410, "journal_unreadable", str(exc)) from None
        except JournalCorrupt as exc:
            raise BridgeError(500, "journal_corrupt", str(exc)) from None

    async def _claim(self, lease: Lease) -> Journal:
        """The first journal action claims, exactly as ``tc.journal()`` does."""
        if lease.journal is None:
            lease.journal_wanted = True
            lease.journal = await self._journal_call(
                lease,
                lambda: open_journal(
                    self._transport,
                    lease.task,
                    holder=lease.holder,
                    restart_limit=self._restart_limit,
                    env=self._env,
                    on_committed=self._on_committed if self._inputs is not None else None,
                ),
            )
        return lease.journal

    async def _on_committed(self, info: CommittedIteration) -> None:
        if self._inputs is not None and info.request_ids:
            await self._inputs.mark_committed(info.run_id, info.step_id, info.request_ids)

    async def _run_cancelled(self, run_id: str) -> bool:
        entry = await self._transport.kv_get(RUNS_BUCKET, run_key(run_id))
        if entry is None or entry.value is None:
            return False
        try:
            return decode_run_header(entry.value).status is RunStatus.CANCELLED
        except DecodeError:
            return False

    async def _cancel(self, lease: Lease) -> BridgeError:
        lease.holder.cancel()
        await self._ack(lease)
        return cancelled(lease.task.run_id)

    # --- routes -------------------------------------------------------------------------------

    async def heartbeat(self, token: str) -> HeartbeatView:
        """Extend the AckWait and check the run and the claim."""
        async with self._use(token) as lease:
            h = lease.holder
            if h.fenced:
                raise fenced("a successor claimed this task's journal")
            if h.cancelled:
                raise cancelled(lease.task.run_id)
            if lease.finished is not None:
                raise BridgeError(*lease.finished)
            if await self._run_cancelled(lease.task.run_id):
                raise await self._cancel(lease)
            if lease.journal is not None:
                subject = journal_subject(lease.task.run_id, lease.task.step_id)
                tail = await self._transport.get_last_msg(JOURNAL_STREAM, subject)
                if tail is None or tail.seq != lease.journal.last_seq:
                    h.fence()
                    raise fenced("the journal moved past this lease's claim: a successor owns it")
            if lease.lapsed:
                raise gone(
                    "lease_expired",
                    "no request came within the AckWait, so the task was left for redelivery",
                )
            await lease.delivery.in_progress()
            return HeartbeatView(
                ack_wait_ms=round(self._ack_wait_s * 1000), claimed=lease.journal is not None
            )

    async def journal_read(self, token: str) -> ClaimedJournal:
        """Claim (on first use), then the claim and the records of the current iteration."""
        async with self._use(token) as lease:
            self._check_active(lease)
            journal = await self._claim(lease)
            records, truncated = await self._iteration_records(lease, journal.last_seq)
            t = lease.task
            return ClaimedJournal(
                claim_id=journal.claim_id,
                last_seq=journal.last_seq,
                iteration=t.dispatch.iteration,
                attempt=t.dispatch.attempt,
                records=tuple(records),
                truncated=truncated,
            )

    async def _iteration_records(
        self, lease: Lease, to_seq: int
    ) -> tuple[list[BridgeJournalEntry], bool]:
        t = lease.task
        subject = journal_subject(t.run_id, t.step_id)
        out: list[BridgeJournalEntry] = []
        seq = max(t.journal_seq or 1, 1)
        while seq <= to_seq:
            page = await self._transport.read_subject(
                JOURNAL_STREAM, subject, seq, JOURNAL_READ_PAGE_RECORDS
            )
            for msg in page:
                if msg.seq > to_seq:
                    return out, False
                try:
                    rec = decode_record(msg.data)
                except DecodeError as exc:
                    raise BridgeError(
                        500, "journal_corrupt", f"journal record {msg.seq} is unreadable: {exc}"
                    ) from None
                if rec.iteration != t.dispatch.iteration:
                    continue
                if len(out) >= JOURNAL_READ_MAX_RECORDS:
                    return out, True
                out.append(BridgeJournalEntry(msg.seq, converter.unstructure(rec, JournalRecord)))
            if len(page) < JOURNAL_READ_PAGE_RECORDS:
                break
            seq = page[-1].seq + 1
        return out, False

    async def journal_append(self, token: str, raw: dict[str, JsonValue]) -> Appended:
        """Append a client's record (validated before anything is claimed)."""
        record = _decode_append(raw)
        async with self._use(token) as lease:
            self._check_active(lease)
            journal = await self._claim(lease)
            t = lease.task
            fill: dict[str, Any] = {
                "iteration": t.dispatch.iteration,
                "attempt": t.dispatch.attempt,
                "claim_id": journal.claim_id,
            }
            if isinstance(record, ToolIntentRecord) and not record.key:
                fill["key"] = f"{t.run_id}.{t.step_id}.{t.dispatch.iteration}.{record.call}"
            filled = attrs.evolve(record, **fill)
            seq = await self._journal_call(lease, lambda: journal.append(filled))
            return Appended(seq)

    async def load_checkpoint(self, token: str) -> CheckpointState:
        async with self._use(token) as lease:
            self._check_active(lease)
            t = lease.task
            if lease.journal is not None:
                journal = lease.journal
                state = await self._journal_call(lease, journal.load_state)
                if lease.state_set:
                    return CheckpointState("checkpoint", state)
            elif t.journal_seq is not None:
                ident = TaskIdentity.of(t)
                state = await self._journal_call(
                    lease, lambda: load_commit_state(self._transport, ident)
                )
            else:
                entry = await self._transport.kv_get(
                    CHECKPOINTS_BUCKET, checkpoint_key(t.run_id, t.step_id)
                )
                if entry is None or entry.value is None:
                    return CheckpointState("input", t.input)
                try:
                    return CheckpointState("kv", decode_json(entry.value, where="checkpoint"))
                except JsonPolicyError:
                    raise BridgeError(
                        500, "checkpoint_corrupt", f"checkpoint of step {t.step_id!r} is not JSON"
                    ) from None
            if state is None:
                return CheckpointState("input", t.input)
            return CheckpointState("journal", state, t.journal_seq)

    async def checkpoint(self, token: str, state: JsonValue) -> CheckpointSaved:
        data = _compact(state, "state")
        async with self._use(token) as lease:
            self._check_active(lease)
            if lease.journal is not None:
                lease.journal.set_state(state)
                lease.state_set = True
                return CheckpointSaved("journal")
            self._check_claim_stored(lease)
            cap = lease.task.loop_state_max_bytes
            if cap is not None and len(data) > cap:
                raise BridgeError(
                    413,
                    "checkpoint_too_large",
                    f"checkpoint is {len(data)} bytes; the step's loop_state_max_bytes is {cap} "
                    "(a step that claimed its journal has no such cap)",
                )
            lease.holder.check_writable()
            t = lease.task
            await self._transport.kv_put(
                CHECKPOINTS_BUCKET, checkpoint_key(t.run_id, t.step_id), data
            )
            return CheckpointSaved("kv")

    def _check_claim_stored(self, lease: Lease) -> None:
        if lease.journal is None and lease.journal_wanted:
            raise BridgeError(
                503,
                "journal_unavailable",
                "the journal was asked for but its claim never stored; retry journal/read, or "
                "stop and let the task be redelivered (it cannot be settled outside the journal)",
            )

    async def place_inputs(self, token: str, mode: str) -> PlacedInputs:
        """``tc.place_inputs(mode)``: claim queued inputs and record ``input.placed``."""
        try:
            parsed = Mode(mode)
        except ValueError:
            allowed = ", ".join(m.value for m in Mode)
            raise bad_request(f"mode must be one of {allowed}, got {mode!r}") from None
        inputs = self._inputs
        if inputs is None:
            raise BridgeError(
                503, "inputs_unavailable", "this bridge was built without the inputs service"
            )
        async with self._use(token) as lease:
            self._check_active(lease)
            journal = await self._claim(lease)
            placed = await self._journal_call(
                lease, lambda: place_inputs(journal, inputs, parsed, state=lease.placement)
            )
            return PlacedInputs(
                tuple(
                    PlacedInputView(p.request_id, p.mode.value, p.content, p.iteration)
                    for p in placed
                )
            )

    async def complete(self, token: str, output: JsonValue) -> Settled:
        return await self._settle(token, CommitAction.COMPLETE, output=output)

    async def fail(self, token: str, error: str, retriable: bool) -> Settled:
        return await self._settle(token, CommitAction.FAIL, error=error, retriable=retriable)

    async def continue_(
        self,
        token: str,
        output: JsonValue,
        *,
        delay_ms: int | None = None,
        until_ms: int | None = None,
        until_input: bool = False,
    ) -> Settled:
        for name, value in (("delay_ms", delay_ms), ("until_ms", until_ms)):
            if value is not None and value < 0:
                raise bad_request(f"{name} must be >= 0, got {value}", "invalid_wait")
        if delay_ms is not None and delay_ms > MAX_WAIT_MS:
            raise bad_request(f"delay_ms may be at most {MAX_WAIT_MS}", "invalid_wait")
        if until_ms is not None and until_ms > MAX_UNTIL_MS:
            raise bad_request(f"until_ms may be at most {MAX_UNTIL_MS}", "invalid_wait")
        wait = Wait(delay_ms=delay_ms, until_ms=until_ms, until_input=until_input)
        return await self._settle(
            token, CommitAction.CONTINUE, output=output, wait=None if wait.is_empty() else wait
        )

    async def pause(self, token: str, duration_ms: int) -> Settled:
        if not 0 <= duration_ms <= MAX_WAIT_MS:
            raise bad_request(f"duration_ms must be from 0 to {MAX_WAIT_MS}", "invalid_wait")
        return await self._settle(token, CommitAction.PAUSE, pause_ms=duration_ms)

    async def _settle(
        self,
        token: str,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        pause_ms: int | None = None,
    ) -> Settled:
        """Commit then publish once claimed (the SDK's ``settle``), else publish the lifecycle
        event with the dispatch identity; then ack."""
        _compact(output, "output")
        async with self._use(token) as lease:
            self._check_active(lease)
            self._check_claim_stored(lease)
            t = lease.task
            if await self._run_cancelled(t.run_id):
                raise await self._cancel(lease)
            if (
                wait is not None
                and wait.until_input
                and self._inputs is not None
                and await self._inputs.has_queued(t.run_id, t.step_id)
            ):
                raise BridgeError(
                    409,
                    "inputs_queued",
                    f"inputs are queued for step {t.step_id!r}: place them and run a turn "
                    "(nothing was settled)",
                )
            journal = lease.journal
            request = SettleRequest(action, output, wait, error, retriable, pause_ms)
            try:
                seq = await self._journal_call(
                    lease,
                    lambda: settle_delivery(self._transport, lease.holder, journal, request),
                )
            except TransportError as exc:
                if journal is None:
                    raise
                # The commit may have stored: the handle is closed either way, so the task
                # is left for redelivery, whose claim republishes a stored commit.
                code = "not_provisioned" if isinstance(exc, NotProvisioned) else "unavailable"
                lease.finished = (
                    503,
                    code,
                    f"NATS failed while settling ({exc}); the task is left for redelivery",
                )
                raise BridgeError(*lease.finished) from None
            await self._finish(lease, 410, "settled", "this task is already settled")
            return Settled(action.value, seq)


def _compact(value: JsonValue, what: str) -> bytes:
    try:
        return encode_json(value, where=what)
    except JsonPolicyError as exc:
        raise bad_request(str(exc), "invalid_json") from None


def _decode_append(raw: dict[str, JsonValue]) -> JournalRecord:
    """The client's record, with placeholders where the bridge fills in its claim."""
    kind = raw.get("type")
    if kind in ("claim", "commit", "input.placed"):
        how = {
            "claim": "journal/read or journal/append claims",
            "commit": "complete, fail, continue and pause commit",
            "input.placed": "inputs/place claims each input and records it",
        }[str(kind)]
        raise bad_request(f"a client does not append {kind!r} records: {how}", "invalid_record")
    cls = APPENDABLE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        allowed = ", ".join(sorted(APPENDABLE))
        raise bad_request(f"type must be one of {allowed}, got {kind!r}", "invalid_record")
    named = [k for k in FILLED_FIELDS if k in raw]
    if named:
        raise bad_request(
            f"{', '.join(named)} must not be sent: the bridge fills them from the lease",
            "invalid_record",
        )
    fields = {f.name for f in attrs.fields(cls)}
    unknown = sorted(k for k in raw if k != "type" and k not in fields)
    if unknown:
        allowed = ", ".join(sorted(fields - set(FILLED_FIELDS)))
        raise bad_request(
            f"unknown field(s) {', '.join(unknown)} for {kind!r}; allowed: {allowed}",
            "invalid_record",
        )
    if cls is ToolIntentRecord and "key" not in raw:
        raw = {**raw, "key": ""}
    placeholder = {**raw, "iteration": 0, "attempt": 0, "claim_id": ""}
    try:
        record: JournalRecord = from_obj(placeholder, JournalRecord, f"{kind} record")
    except DecodeError as exc:
        raise bad_request(str(exc), "invalid_record") from None
    call = getattr(record, "call", 0)
    if call < 0:
        raise bad_request(f"call must be >= 0, got {call}", "invalid_record")
    return record
