"""``Worker``: pulls task messages, runs handlers, settles each delivery exactly as it ended."""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Final, final

import trio

from dagnats_trio._env import DEFAULT_ENV, Backoff, RuntimeEnv
from dagnats_trio.inputs import InputsService
from dagnats_trio.journal import (
    DEFAULT_RESTART_LIMIT,
    DeliveryState,
    OnCommitted,
    Settlement,
    TaskIdentity,
    check_restart_limit,
)
from dagnats_trio.protocol import DecodeError, check_id, decode_task
from dagnats_trio.protocol.layout import (
    TASK_STREAM,
    cancel_subject,
    worker_durable,
)
from dagnats_trio.transport import (
    Closed,
    CoreMsg,
    Delivery,
    NotProvisioned,
    Puller,
    Transport,
    TransportError,
)

from .._defaults import DEFAULT_ACK_WAIT_S
from ._context import InputsPending, TaskContext, _WorkerShared, error_text
from ._errors import JournalUnavailable
from ._hand_back import HandBack
from ._lease import keep_alive, task_consumer
from ._mark_done import with_mark_done
from ._polls import POLL_MARK_INTERVAL_S, mark_polls
from ._slots import Slots

_log = logging.getLogger(__name__)

Handler = Callable[[TaskContext], Awaitable[None]]

DEFAULT_CONCURRENCY: Final = 16
#: How long a pull request (the loop's, or one an ack carries) waits for a task: while idle,
#: the loop asks again this often.
FETCH_WAIT_S: Final = 1.0
#: Most deliveries asked for in one fetch.
FETCH_BATCH_MAX: Final = 16
#: Pause after a failed fetch, doubling up to the cap (jittered: see ``Backoff``).
FETCH_BACKOFF_START_S: Final = 0.1
FETCH_BACKOFF_MAX_S: Final = 2.0
#: Every subject a cancel announcement can come on.
CANCEL_SUBJECTS: Final = cancel_subject("*")


@final
class Worker:
    """Runs handlers for task types: ``await nursery.start(worker.run)``.

    ``ack_wait_s`` is the lease on a task's first delivery (``_lease``: 0.8 s by default, longer
    on each redelivery); the worker's heartbeat keeps it while the handler runs, so it bounds
    only how long the task of a dead (or silent) worker waits for another one.

    ``inputs`` wires the inputs service: ``tc.place_inputs`` places through it, each commit marks
    the inputs its iteration placed ``done``, and ``continue_`` with ``UntilInput()`` raises
    ``InputsQueued`` while inputs are queued. ``on_committed`` (told after each journal commit
    stores, not failures) and ``inputs_pending`` are the raw hooks under that: a given
    ``on_committed`` runs after the marking, a given ``inputs_pending`` replaces the check.

    While it runs, the worker marks each of its task types as polled every
    ``poll_mark_interval_s`` (``_polls``), so the API can tell a run that waits on a type nobody
    serves.
    """

    def __init__(
        self,
        transport: Transport,
        handlers: Mapping[str, Handler],
        *,
        env: RuntimeEnv = DEFAULT_ENV,
        concurrency: int = DEFAULT_CONCURRENCY,
        ack_wait_s: float = DEFAULT_ACK_WAIT_S,
        restart_limit: int = DEFAULT_RESTART_LIMIT,
        worker_id: str | None = None,
        on_committed: OnCommitted | None = None,
        inputs_pending: InputsPending | None = None,
        inputs: InputsService | None = None,
        poll_mark_interval_s: float = POLL_MARK_INTERVAL_S,
    ) -> None:
        if not handlers:
            raise ValueError("a worker needs at least one handler")
        for task_type, handler in handlers.items():
            check_id("task_type", task_type)
            if not callable(handler):
                raise ValueError(f"the handler for {task_type!r} is not callable")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        if (
            isinstance(ack_wait_s, bool)
            or not isinstance(ack_wait_s, int | float)
            or not math.isfinite(ack_wait_s)
            or ack_wait_s <= 0
        ):
            raise ValueError(f"ack_wait_s must be a positive number of seconds, got {ack_wait_s!r}")
        if not poll_mark_interval_s > 0:
            raise ValueError(
                f"poll_mark_interval_s must be a positive number, got {poll_mark_interval_s!r}"
            )
        self._poll_mark_interval_s = poll_mark_interval_s
        self._transport = transport
        self._handlers = dict(handlers)
        self._concurrency = concurrency
        self._ack_wait_s = float(ack_wait_s)
        self._worker_id = worker_id if worker_id is not None else env.new_id()
        self._services = _WorkerShared(
            transport=transport,
            env=env,
            restart_limit=check_restart_limit(restart_limit),
            on_committed=with_mark_done(inputs, on_committed),
            inputs_pending=(
                inputs.has_queued
                if inputs is not None and inputs_pending is None
                else inputs_pending
            ),
            inputs=inputs,
        )
        self._live: dict[str, set[DeliveryState]] = {}
        #: Every delivery being handled, beaten by the one ``keep_alive`` loop (``_lease``).
        self._beating: dict[DeliveryState, Delivery] = {}

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def ack_wait_s(self) -> float:
        return self._ack_wait_s

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Create the consumers, listen for cancels, pull and run tasks until cancelled."""
        for task_type in self._handlers:
            await self._transport.ensure_consumer(task_consumer(task_type, self._ack_wait_s))
        slots = Slots(self._concurrency)
        async with (
            self._transport.subscribe(CANCEL_SUBJECTS) as cancels,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(self._listen_for_cancels, cancels)
            nursery.start_soon(keep_alive, self._beating, self._ack_wait_s)
            nursery.start_soon(
                mark_polls,
                self._transport,
                self._handlers,
                self._worker_id,
                self._services.env,
                self._poll_mark_interval_s,
            )
            for task_type in self._handlers:
                nursery.start_soon(self._pull, task_type, slots, nursery)
            task_status.started()

    async def _listen_for_cancels(self, cancels: AsyncIterator[CoreMsg]) -> None:
        async for msg in cancels:
            run_id = msg.subject.partition(".")[2]
            for holder in list(self._live.get(run_id, ())):
                holder.cancel()

    async def _pull(self, task_type: str, slots: Slots, nursery: trio.Nursery) -> None:
        """Ask for free places while nothing is asked; each delivery gets a task of its own.

        While anything is asked, the loop asks for nothing more: a finished delivery's ack asks
        for the place it frees (an ack with next, :meth:`_finish`), so one task after another
        costs no pull request of the loop's. When everything asked is filled or released (its
        request expired: every ``FETCH_WAIT_S`` while idle), the loop asks for the free places
        again, waiting for one when none is (the places it waits for are then owed to it: a
        delivery that ends meanwhile acks plainly and gives its place back).

        A delivery's task is started by the puller's ``on_delivery`` (``start``), not by this
        loop: on the native transport in the connection's reader as the delivery arrives, so
        this loop does not wake per delivery (its fetch returns when nothing is asked any more,
        or every ``FETCH_WAIT_S``), and it runs in this loop's context. A delivery whose task
        is cancelled at its first step (it came as the worker left) is handed back (nakked)
        once the puller has left (``_hand_back``): redelivered now, not after its AckWait.
        """
        durable = worker_durable(task_type)
        backoff = Backoff(FETCH_BACKOFF_START_S, FETCH_BACKOFF_MAX_S, self._services.env.random)

        # A task inherits the context variables of the task that starts it: a delivery's task
        # gets this loop's (the crash hook, its caller's variables), as when this loop started
        # it, not the connection reader's, which calls ``start``.
        context = contextvars.copy_context()

        hand_back = HandBack()

        def start(delivery: Delivery) -> None:
            # ``puller`` is bound below before anything is asked, so before any delivery.
            context.run(nursery.start_soon, self._deliver, delivery, slots, puller, hand_back)

        try:
            async with self._transport.pull(
                TASK_STREAM,
                durable,
                expires_s=FETCH_WAIT_S,
                on_release=slots.give_back,
                on_delivery=start,
            ) as puller:
                while True:
                    try:
                        if puller.asked == 0:
                            # Free places are taken without a scheduler step: the ask below
                            # checkpoints either way.
                            taken = await slots.take(FETCH_BATCH_MAX)
                            try:
                                await puller.ask(taken)
                            except BaseException:
                                slots.give_back(taken)
                                raise
                        # Returns [] (its deliveries went to ``start``).
                        await puller.fetch(FETCH_WAIT_S)
                    except (Closed, NotProvisioned):
                        raise
                    except TransportError as exc:
                        # The first failure in a row is worth a warning; the rest of an outage
                        # is the transport's to report (once down, once back), not a line per
                        # retry.
                        log = _log.warning if backoff.failures == 0 else _log.debug
                        log("fetch from %s failed: %s; retrying with backoff", durable, exc)
                        await trio.sleep(backoff.next_s())
                        continue
                    backoff.reset()
        finally:
            # The puller has left (its inbox and requests gone): a nak is not redelivered
            # into it.
            await hand_back.puller_left()

    async def _deliver(
        self, delivery: Delivery, slots: Slots, puller: Puller, hand_back: HandBack
    ) -> None:
        """Handle one delivery and settle it; its place is given back however it ends.

        The handler runs in this frame (the delivery task's own), in the delivery's nursery
        (helpers from ``tc.start_soon`` beside it), inside the scope that a run cancel or a
        lost lease cancels; when the handler returns, its helpers are cancelled, and a
        helper's exception is the delivery's error. That scope is the nursery's own: it holds
        the handler and every helper, and it catches the cancellation it raises, so a scope of
        its own around the nursery would only cost one more scope entered and closed per
        delivery. No frame of a helper method sits between this task and the handler: every
        time the handler wakes (each journal write, each tool), each frame above it is passed
        through again.

        Its place is given back when it ends, unless its ack asked for the next delivery in
        that place (:meth:`_finish`).

        A task cancelled at its first step (the worker is leaving) has claimed and run
        nothing: its delivery is handed back (``_hand_back``), redelivered at once. Once the
        handler has run, a leaving worker never settles the delivery: it comes back after its
        AckWait, as any work cut short."""
        asked_next = False
        try:
            if trio.current_effective_deadline() == -math.inf:
                await hand_back.give(delivery)
                return
            try:
                task = decode_task(delivery.data)
            except DecodeError as exc:
                _log.error("dropping an unreadable task message on %s: %s", delivery.subject, exc)
                await delivery.term()
                return
            handler = self._handlers.get(task.task)
            if handler is None:
                _log.error("no handler for task type %r (subject %s)", task.task, delivery.subject)
                await delivery.term()
                return
            holder = DeliveryState(TaskIdentity.of(task), worker_id=self._worker_id)
            live = self._live.setdefault(task.run_id, set())
            live.add(holder)
            self._beating[holder] = delivery
            try:
                error: Exception | None = None
                tc: TaskContext | None = None
                try:
                    async with trio.open_nursery() as nursery:
                        holder.scope = nursery.cancel_scope
                        if holder.cancelled or holder.lease_lost_because:
                            nursery.cancel_scope.cancel()
                        tc = TaskContext(self._services, task, delivery, holder, nursery)
                        try:
                            await handler(tc)
                        except Exception as exc:
                            error = exc
                        nursery.cancel_scope.cancel()
                except ExceptionGroup as group:
                    # A helper failed (the handler's own exception was caught above).
                    error = group.exceptions[0] if len(group.exceptions) == 1 else group
                finally:
                    holder.scope = None
                assert tc is not None  # the nursery body runs at least until the context exists
                asked_next = await self._finish(tc, holder, delivery, error, slots, puller)
            finally:
                del self._beating[holder]
                live.discard(holder)
                if not live:
                    self._live.pop(task.run_id, None)
        finally:
            if not asked_next:
                slots.give_back(1)

    async def _finish(
        self,
        tc: TaskContext,
        holder: DeliveryState,
        delivery: Delivery,
        error: Exception | None,
        slots: Slots,
        puller: Puller,
    ) -> bool:
        """Settle what the handler left unsettled, then ack unless the holder died or was
        fenced (its successor owns the same message). True when the ack asked for the next
        delivery in this delivery's place (then the place is the puller's, not given back).

        The ack carries the next request unless a pull loop waits for a place (it is owed
        that place: another task type's loop must not wait behind this one's tasks) or the
        worker is leaving (its scope cancelled: nothing more is pulled to a worker that goes)."""
        if holder.killed or holder.fenced:
            return False
        if holder.lease_lost_because and holder.settlement is None:
            _log.warning(
                "%s.%s lost its lease (%s); it will be redelivered",
                tc.run_id,
                tc.step_id,
                holder.lease_lost_because,
            )
            return False
        if holder.settlement is None and not holder.cancelled and not tc.settling:
            try:
                if error is None:
                    await tc.complete(None)
                else:
                    _log.warning(
                        "handler of %s.%s (task %s) failed; the error is kept on the run",
                        tc.run_id,
                        tc.step_id,
                        tc.task.task,
                        exc_info=error,
                    )
                    await tc.fail(error_text(error))
            except JournalUnavailable as exc:
                _log.info("%s", exc)
                return False
            except Exception as exc:
                _log.warning("could not settle %s.%s: %r", tc.run_id, tc.step_id, exc)
        if holder.killed or holder.fenced:
            return False
        if holder.settlement is Settlement.ACK or holder.cancelled:
            # Not waiting for the server: the event (if any) is already stored, so a lost ack
            # is a redelivery that the journal answers with Committed (or Stale), and that the
            # engine's acceptance rule makes harmless for a plain step.
            try:
                if slots.waiting == 0 and trio.current_effective_deadline() != -math.inf:
                    return puller.ack_next(delivery)
                delivery.ack_nowait()
            except TransportError as exc:
                _log.warning("ack of %s failed: %s", delivery.subject, exc)
        else:
            _log.warning("%s.%s left unsettled; it will be redelivered", tc.run_id, tc.step_id)
        return False
