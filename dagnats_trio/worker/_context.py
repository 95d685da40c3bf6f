"""``TaskContext``: what a handler sees of its task, and how it settles it."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import final

import attrs
import trio

from dagnats_trio._env import RuntimeEnv
from dagnats_trio.inputs import InputsService, Mode, PlacedInput, PlacementState
from dagnats_trio.inputs import place_inputs as _place_inputs
from dagnats_trio.journal import (
    DeliveryState,
    Journal,
    KnownCommits,
    OnCommitted,
    SettleRequest,
    TaskIdentity,
    load_commit_state,
    open_journal,
    settle_delivery,
)
from dagnats_trio.protocol import (
    CommitAction,
    DecodeError,
    DispatchId,
    JsonPolicyError,
    JsonValue,
    RunStatus,
    TaskMessage,
    Wait,
    check_json,
    decode_json,
    decode_run_header,
    encode_json,
)
from dagnats_trio.protocol.layout import (
    CHECKPOINTS_BUCKET,
    RUNS_BUCKET,
    checkpoint_key,
    preview_subject,
    run_key,
)
from dagnats_trio.transport import Delivery, Transport

from ._errors import (
    AlreadySettled,
    CheckpointTooLarge,
    InputsQueued,
    JournalUnavailable,
    RunCancelled,
)
from ._waits import WaitArg, build_wait

#: ``async (run_id, step_id) -> bool``: are inputs queued for the step? (wired to the inputs
#: service; lets ``continue_(wait=UntilInput())`` raise InputsQueued instead of waiting).
InputsPending = Callable[[str, str], Awaitable[bool]]


@final
class InputsUnavailable(RuntimeError):
    """``place_inputs`` cannot run: the worker has no inputs service, or the handler has not
    opened the journal (placement is recorded there)."""


@attrs.frozen
class _WorkerShared:
    transport: Transport
    env: RuntimeEnv
    restart_limit: int
    on_committed: OnCommitted | None
    inputs_pending: InputsPending | None
    inputs: InputsService | None = None
    #: The continue commits this worker stored: its next claim of such a step skips the tail
    #: read (the journal's predicted claim).
    known: KnownCommits = attrs.field(factory=KnownCommits)


def _to_json(what: str, value: JsonValue) -> bytes:
    """``value`` encoded by the one JSON policy; a value that breaks it is the handler's bug."""
    try:
        return encode_json(value, where=what)
    except JsonPolicyError as exc:
        raise _not_json(what, exc) from None


def _require_json(what: str, value: JsonValue) -> None:
    """:func:`_to_json`'s check and error, for a value whose bytes are not needed here (the
    step output: the commit or the event that carries it encodes it)."""
    try:
        check_json(value, where=what)
    except JsonPolicyError as exc:
        raise _not_json(what, exc) from None


def _not_json(what: str, exc: JsonPolicyError) -> TypeError:
    return TypeError(f"{what} is not a JSON value: {exc}")


@final
class TaskContext:
    """One delivery of one task. The handler runs in the delivery's own nursery, whose cancel
    scope the run's cancellation and a lost lease cancel (the spec's ``tc.Context()``); helpers
    started with :meth:`start_soon` run in it too, so they end with the delivery."""

    def __init__(
        self,
        services: _WorkerShared,
        task: TaskMessage,
        delivery: Delivery,
        holder: DeliveryState,
        nursery: trio.Nursery,
    ) -> None:
        self._svc = services
        self._nursery = nursery
        self._task = task
        self._delivery = delivery
        self._holder = holder
        self._journal: Journal | None = None
        #: Set once the handler asked for the journal: from then on only the journal may settle.
        self._journal_wanted = False
        self._settling = False
        self._placement = PlacementState()

    # --- what the task is ---------------------------------------------------------------------

    @property
    def task(self) -> TaskMessage:
        return self._task

    @property
    def input(self) -> JsonValue:
        return self._task.input

    @property
    def run_id(self) -> str:
        return self._task.run_id

    @property
    def step_id(self) -> str:
        return self._task.step_id

    @property
    def iteration(self) -> int:
        return self._task.dispatch.iteration

    @property
    def attempt(self) -> int:
        return self._task.dispatch.attempt

    @property
    def dispatch(self) -> DispatchId:
        return self._task.dispatch

    @property
    def worker_id(self) -> str:
        return self._holder.worker_id

    @property
    def claim_id(self) -> str | None:
        """The ``claim_id`` of this delivery's journal claim (every record it writes carries it),
        once ``await tc.journal()`` has claimed; None before, and for a step without a journal.
        Record it beside effects counted outside the runtime to tie them to journal claims."""
        return self._journal.claim_id if self._journal is not None else None

    @property
    def num_delivered(self) -> int:
        return self._delivery.num_delivered

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Start a helper task in this delivery's nursery: it is cancelled with the delivery (the
        run's cancellation, a lost lease) and when the handler returns; an exception it raises
        fails the delivery like the handler's own. Raises RuntimeError once the delivery is over."""
        self._nursery.start_soon(fn, *args)

    def key(self, *parts: str | int) -> str:
        """An idempotency key for this iteration, ``{run}.{step}.{iteration}[.part...]``: the
        same on every delivery and attempt (journal calls get theirs in ``call.key``)."""
        return iteration_key(self.run_id, self.step_id, self.iteration, *parts)

    @property
    def settled(self) -> bool:
        return self._holder.settlement is not None

    @property
    def settling(self) -> bool:
        """True once a settle call (complete, fail, continue_, pause) has begun, even if it has
        not finished: the worker then leaves the settlement to it."""
        return self._settling

    # --- the journal --------------------------------------------------------------------------

    async def journal(self) -> Journal:
        """Opt in to the per-step journal (see the journal package). Raises ``Stale``,
        ``Committed``, ``RestartLimit`` or ``Fenced`` (``JournalSettled``): let them through."""
        if self._journal is None:
            if self._settling or self.settled:
                raise AlreadySettled("the task is settled; the journal can no longer be opened")
            self._journal_wanted = True
            self._journal = await open_journal(
                self._svc.transport,
                self._task,
                holder=self._holder,
                restart_limit=self._svc.restart_limit,
                env=self._svc.env,
                on_committed=self._svc.on_committed,
                known=self._svc.known,
                first_delivery=self._delivery.num_delivered == 1,
            )
        else:
            await trio.lowlevel.checkpoint()
        return self._journal

    async def place_inputs(self, mode: Mode | str) -> list[PlacedInput]:
        """Claim the queued inputs of ``mode`` (``Mode.STEER``, ``Mode.FOLLOW_UP`` or their
        values) and record them in the journal, in submission order.

        A redelivery of the iteration first gets what an earlier delivery placed, once. Needs
        ``await tc.journal()`` first, and a worker built with ``inputs=``.
        """
        parsed = _parse_mode(mode)
        inputs = self._svc.inputs
        if inputs is None:
            raise InputsUnavailable(
                "this worker was built without inputs: pass inputs=InputsService(transport) "
                "to Worker to use place_inputs"
            )
        if self._journal is None:
            raise InputsUnavailable(
                "place_inputs needs the journal: call `await tc.journal()` first (placement is "
                "recorded there)"
            )
        if self._settling or self.settled:
            raise AlreadySettled("the task is settled; inputs can no longer be placed")
        return await _place_inputs(self._journal, inputs, parsed, state=self._placement)

    # --- state --------------------------------------------------------------------------------

    async def checkpoint(self, state: JsonValue) -> None:
        """Save the state for the next iteration. A journal step's state rides its commit (no
        cap); other steps write KV, capped by the step's ``loop_state_max_bytes``."""
        if self._journal is not None:
            self._journal.set_state(state)
            await trio.lowlevel.checkpoint()
            return
        data = _to_json("checkpoint state", state)
        cap = self._task.loop_state_max_bytes
        if cap is not None and len(data) > cap:
            raise CheckpointTooLarge(
                f"checkpoint of step {self.step_id!r} is {len(data)} bytes; the step's "
                f"loop_state_max_bytes is {cap} (journal steps have no such cap)"
            )
        self._holder.check_writable()
        await self._svc.transport.kv_put(
            CHECKPOINTS_BUCKET, checkpoint_key(self.run_id, self.step_id), data
        )

    async def load_checkpoint(self) -> JsonValue:
        """The last saved state, or None. A journal step reads its commit: one get by sequence."""
        if self._journal is not None:
            return await self._journal.load_state()
        if self._task.journal_seq is not None:
            return await load_commit_state(self._svc.transport, TaskIdentity.of(self._task))
        entry = await self._svc.transport.kv_get(
            CHECKPOINTS_BUCKET, checkpoint_key(self.run_id, self.step_id)
        )
        if entry is None or entry.value is None:
            return None
        try:
            return decode_json(entry.value, where="checkpoint")
        except JsonPolicyError as exc:
            raise DecodeError(f"checkpoint of step {self.step_id!r} is not JSON: {exc}") from None

    # --- liveness -----------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        """Extend the AckWait and check the run: raises ``RunCancelled`` (and cancels this
        delivery's scope) once the run is cancelled, even if the announcement was lost."""
        if self._holder.cancelled:
            raise RunCancelled(f"run {self.run_id} was cancelled")
        await self._delivery.in_progress()
        entry = await self._svc.transport.kv_get(RUNS_BUCKET, run_key(self.run_id))
        if entry is None or entry.value is None:
            return
        try:
            header = decode_run_header(entry.value)
        except DecodeError:
            return
        if header.status is RunStatus.CANCELLED:
            self._holder.cancel()
            raise RunCancelled(f"run {self.run_id} was cancelled")

    async def put_stream(self, data: bytes | str) -> None:
        """A live preview on core NATS (``preview.{run}.{step}``): not a record, not replayed."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        await self._svc.transport.core_publish(preview_subject(self.run_id, self.step_id), raw)

    # --- settling -----------------------------------------------------------------------------

    async def complete(self, output: JsonValue = None) -> None:
        """The step is done with ``output``."""
        await self._settle(CommitAction.COMPLETE, output=output)

    async def fail(self, error: str | BaseException) -> None:
        """This attempt failed; the step's retry policy decides what next."""
        await self._settle(CommitAction.FAIL, error=error_text(error), retriable=True)

    async def fail_permanent(self, error: str | BaseException) -> None:
        """The step failed and must not be retried."""
        await self._settle(CommitAction.FAIL, error=error_text(error), retriable=False)

    async def continue_(self, output: JsonValue = None, wait: WaitArg = None) -> None:
        """End this iteration of an agent loop; the engine sends the next one (after ``wait``:
        ``Delay``, ``Until``, ``UntilInput`` or a tuple of them, whichever comes first)."""
        built = build_wait(wait)
        pending = self._svc.inputs_pending
        if (
            built is not None
            and built.until_input
            and pending is not None
            and await pending(self.run_id, self.step_id)
        ):
            raise InputsQueued(
                f"inputs are queued for step {self.step_id!r}: place them and run a turn"
            )
        await self._settle(CommitAction.CONTINUE, output=output, wait=built)

    async def pause(self, duration_s: float) -> None:
        """Park the step for ``duration_s`` seconds; it comes back to the same iteration and
        attempt. Progress, not a failure: it does not count toward the restart limit."""
        if (
            isinstance(duration_s, bool)
            or not isinstance(duration_s, int | float)
            or not math.isfinite(duration_s)
            or duration_s < 0
        ):
            raise ValueError(
                f"pause duration must be a finite number of seconds >= 0: {duration_s!r}"
            )
        await self._settle(CommitAction.PAUSE, pause_ms=round(duration_s * 1000))

    async def _settle(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        pause_ms: int | None = None,
    ) -> None:
        if self._settling or self.settled:
            raise AlreadySettled(
                "this task is already settled: call complete, fail, fail_permanent, continue_ "
                "or pause once (and not after the journal settled it)"
            )
        _require_json("step output", output)
        if self._journal is None and self._journal_wanted:
            raise JournalUnavailable(
                f"{self.run_id}.{self.step_id}: the journal was never claimed, so the step cannot "
                "be settled; the task is left for redelivery"
            )
        self._settling = True
        await settle_delivery(
            self._svc.transport,
            self._holder,
            self._journal,
            SettleRequest(action, output, wait, error, retriable, pause_ms, output_checked=True),
        )


def _parse_mode(mode: Mode | str) -> Mode:
    if isinstance(mode, Mode):
        return mode
    if isinstance(mode, str):
        try:
            return Mode(mode)
        except ValueError:
            pass
    allowed = ", ".join(repr(m.value) for m in Mode)
    raise ValueError(f"mode must be a Mode or one of {allowed}, got {mode!r}")


def iteration_key(run_id: str, step_id: str, iteration: int, *parts: str | int) -> str:
    """``tc.key(...)``: ``{run}.{step}.{iteration}[.part...]``, the same on every delivery and
    attempt (the live context's and the golden replay's)."""
    return ".".join([f"{run_id}.{step_id}.{iteration}", *(str(p) for p in parts)])


def error_text(error: str | BaseException) -> str:
    """The error a fail commit records: an exception as ``Type: message`` (or just ``Type``)."""
    if isinstance(error, BaseException):
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return str(error)
