"""``Bridge``: task deliveries leased to HTTP clients, settled with the Python SDK's fencing.

A lease is one delivery from the durable consumer ``workers-{task_type}`` (the one Python workers
of that type share), held for a client that keeps heart-beating. Everything that decides what a
delivery may still do is the same code the Python worker runs: :func:`open_journal` claims,
:meth:`Journal.append` and :meth:`Journal.settle` write fenced, the :class:`DeliveryState` flags say
whether to ack. The bridge only adds the lease table (:mod:`._leases`), its bounds and the
translation of outcomes into answers a client in any language can act on (:mod:`._lease`); this
module holds the route operations, but for the ones that settle a lease (:mod:`._settle_routes`).
"""

from __future__ import annotations

from typing import Any, Final, final

import attrs
import trio

from .._env import DEFAULT_ENV, RuntimeEnv
from ..inputs import InputsService, Mode, place_inputs
from ..journal import (
    DEFAULT_RESTART_LIMIT,
    CommittedIteration,
    Journal,
    TaskIdentity,
    call_key,
    check_restart_limit,
    load_commit_state,
    open_journal,
)
from ..protocol import (
    DecodeError,
    JsonPolicyError,
    JsonValue,
    RunStatus,
    ToolIntentRecord,
    decode_json,
    decode_run_header,
)
from ..protocol.layout import (
    CHECKPOINTS_BUCKET,
    JOURNAL_STREAM,
    RUNS_BUCKET,
    checkpoint_key,
    journal_subject,
    run_key,
)
from ..transport import Transport
from ..worker import DEFAULT_ACK_WAIT_S
from ._errors import BridgeError, bad_request, cancelled, fenced
from ._lease import (
    Lease,
    ack,
    check_active,
    check_claim_stored,
    expired,
    journal_call,
)
from ._leases import (
    DEFAULT_MAX_LEASES,
    MAX_POLL_WAIT_CEILING_S,
    MAX_POLL_WAIT_S,
    LeaseTable,
    positive_seconds,
)
from ._records import (
    compact_json,
    decode_append,
    iteration_records,
    read_iteration,
    refuse_misplaced,
)
from ._settle_routes import SettleRoutes
from ._views import (
    Appended,
    CheckpointSaved,
    CheckpointState,
    ClaimedJournal,
    HeartbeatView,
    LeaseView,
    PlacedInputs,
    PlacedInputView,
)

#: How long a client may go without a request before its lease expires (``ack_wait_ms``). The
#: bridge itself keeps the delivery's much shorter AckWait extended meanwhile.
DEFAULT_CLIENT_ACK_WAIT_S: Final = 30.0


@final
class Bridge(SettleRoutes):
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
        self._ack_wait_s = positive_seconds("ack_wait_s", ack_wait_s)
        self._task_ack_wait_s = positive_seconds("task_ack_wait_s", task_ack_wait_s)
        self._inputs = inputs
        self._leases = LeaseTable(
            transport,
            bridge_id=bridge_id if bridge_id is not None else f"bridge-{env.new_id()}",
            ack_wait_s=self._ack_wait_s,
            task_ack_wait_s=self._task_ack_wait_s,
            max_leases=max_leases,
            max_poll_wait_s=min(
                positive_seconds("max_poll_wait_s", max_poll_wait_s), MAX_POLL_WAIT_CEILING_S
            ),
        )

    @property
    def ack_wait_s(self) -> float:
        return self._ack_wait_s

    @property
    def task_ack_wait_s(self) -> float:
        return self._task_ack_wait_s

    @property
    def lease_count(self) -> int:
        return len(self._leases)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Extend the AckWait of live leases, drop old ones, listen for cancellations."""
        await self._leases.run(task_status=task_status)

    async def poll(self, task_type: str, wait_s: float) -> LeaseView | None:
        """Lease the next task of ``task_type``, waiting up to ``wait_s`` (cut to the bridge's
        maximum); None when there was none."""
        return await self._leases.poll(task_type, wait_s)

    # --- what the routes share ----------------------------------------------------------------

    async def _claim(self, lease: Lease) -> Journal:
        """The first journal action claims, as ``tc.journal()`` does, always reading the tail
        first: the predicted claim (journal ``_open``) is the worker's, not the bridge's. A
        lease's claim waits on an HTTP request anyway, and a predicted claim that the server
        refuses leaves the delivery to come back after its AckWait, where reading first
        claims at once (a task message published again for the same dispatch, say)."""
        if lease.journal is None:
            lease.journal_wanted = True
            lease.journal = await journal_call(
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
        await ack(lease)
        return cancelled(lease.task.run_id)

    # --- routes -------------------------------------------------------------------------------

    async def heartbeat(self, token: str) -> HeartbeatView:
        """Extend the AckWait and check the run and the claim."""
        async with self._leases.use(token) as lease:
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
                raise expired()
            await lease.delivery.in_progress()
            return HeartbeatView(
                ack_wait_ms=round(self._ack_wait_s * 1000), claimed=lease.journal is not None
            )

    async def journal_read(self, token: str) -> ClaimedJournal:
        """Claim (on first use), then the claim and the records of the current iteration."""
        async with self._leases.use(token) as lease:
            check_active(lease)
            journal = await self._claim(lease)
            records, truncated = await iteration_records(
                self._transport, lease.task, journal.last_seq
            )
            t = lease.task
            return ClaimedJournal(
                claim_id=journal.claim_id,
                last_seq=journal.last_seq,
                iteration=t.dispatch.iteration,
                attempt=t.dispatch.attempt,
                records=tuple(records),
                truncated=truncated,
            )

    async def journal_append(self, token: str, raw: dict[str, JsonValue]) -> Appended:
        """Append a client's record (validated before anything is claimed)."""
        record = decode_append(raw)
        async with self._leases.use(token) as lease:
            check_active(lease)
            t = lease.task
            if lease.known is None:
                # Read before the claim, so a misplaced first record claims nothing.
                lease.known = await read_iteration(self._transport, t, skip_unreadable=True)
            placed = attrs.evolve(
                record, iteration=t.dispatch.iteration, attempt=t.dispatch.attempt
            )
            refuse_misplaced(lease.known, placed)
            journal = await self._claim(lease)
            fill: dict[str, Any] = {"claim_id": journal.claim_id}
            if isinstance(record, ToolIntentRecord) and not record.key:
                fill["key"] = call_key(t.run_id, t.step_id, t.dispatch.iteration, record.call)
            filled = attrs.evolve(placed, **fill)
            seq = await journal_call(lease, lambda: journal.append(filled))
            lease.known.append((seq, filled))
            return Appended(seq)

    async def load_checkpoint(self, token: str) -> CheckpointState:
        async with self._leases.use(token) as lease:
            check_active(lease)
            t = lease.task
            if lease.journal is not None:
                journal = lease.journal
                state = await journal_call(lease, journal.load_state)
                if lease.state_set:
                    return CheckpointState("checkpoint", state)
            elif t.journal_seq is not None:
                ident = TaskIdentity.of(t)
                state = await journal_call(lease, lambda: load_commit_state(self._transport, ident))
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
        data = compact_json(state, "state")
        async with self._leases.use(token) as lease:
            check_active(lease)
            if lease.journal is not None:
                lease.journal.set_state(state)
                lease.state_set = True
                return CheckpointSaved("journal")
            check_claim_stored(lease)
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
        async with self._leases.use(token) as lease:
            check_active(lease)
            journal = await self._claim(lease)
            placed = await journal_call(
                lease, lambda: place_inputs(journal, inputs, parsed, state=lease.placement)
            )
            return PlacedInputs(
                tuple(
                    PlacedInputView(p.request_id, p.mode.value, p.content, p.iteration)
                    for p in placed
                )
            )
