"""The engine's I/O shell: history in, one compare-and-set, effects out, ack.

Several engines may share the durable consumer. Correctness never rests on a lock: a snapshot is
written only with compare-and-set on the revision this process last saw, and a loser reloads and
decides again. The hot path keeps the revision it wrote in a small cache, so an agent-loop
iteration costs one KV write and one task publish that wait for the server, and one ack that does
not (see :meth:`Engine._settle`). What the loops share (options, counters, the snapshot cache and
store, settling) is the base class, :class:`~dagnats_trio.engine._shell_state.EngineState`; the
effects are carried out by ``_execute``, and the timer stream's conventions (headers, arming,
the consumer) are ``_timer_stream``'s. Here are the loops: the history loop and its acceptance
of events, and the timer loop that turns a due timer into its ``timer.fired``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

import trio

from .._env import Backoff
from .._seams import Seam, SeamContext, crash_point, hook_installed
from ..dag import WorkflowDef
from ..protocol import (
    DecodeError,
    RunEvent,
    StepCompleted,
    StepContinue,
    StepFailed,
    StepPaused,
    TimerFired,
    WorkflowStarted,
    decode_event,
    layout,
)
from ..transport import ConsumerConfig, Delivery, KeyExists, RevisionMismatch, TransportError
from ._execute import execute_effects
from ._shell_state import (
    LEGACY_ENV_VAR,
    EngineState,
    SnapshotTooLarge,
    log,
)
from ._timer_stream import TIMER_DUE_HEADER, TIMER_ID_HEADER, timer_consumer
from .core import AdvanceContext, Outcome, decide, fail_too_large, service_start_entry
from .effects import Effect, PublishTask
from .snapshot import RunSnapshot

#: Compare-and-set attempts on one event before giving it back to the server.
CAS_ATTEMPTS_MAX = 25
#: Back-off before redelivery of an event for a run with no snapshot yet.
MISSING_RUN_NAK_DELAY_S = 0.2
#: Redeliveries an event waits for its run's snapshot before it is terminated.
MISSING_RUN_MAX_DELIVERIES = 50
#: Back-off before redelivery after a transport error.
ERROR_NAK_DELAY_S = 0.5
#: Shortest nak delay for a not-yet-due timer (the server's own granularity is coarser anyway).
TIMER_MIN_NAK_S = 0.001


@final
class Engine(EngineState):
    """Run with ``await nursery.start(engine.run)``; cancel the nursery to stop it. Beside its
    loops it runs :attr:`start_sweep` (``_start_sweep``: the start of a run whose starter died).

    ``legacy_step_events`` None means: read ``DAGNATS_LEGACY_STEP_EVENTS`` (default true).
    """

    # --- lifecycle -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self.transport.ensure_consumer(
            ConsumerConfig(
                stream=layout.HISTORY_STREAM,
                durable=layout.ENGINE_DURABLE,
                filter_subject=layout.history_subject("*"),
                ack_wait_s=self.ack_wait_s,
            )
        )
        await self.transport.ensure_consumer(timer_consumer(self.timer_ack_wait_s))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run_ends.run)
            nursery.start_soon(self.start_sweep.run)
            nursery.start_soon(self._history_loop)
            nursery.start_soon(self._timer_loop)
            task_status.started()

    # --- history -------------------------------------------------------------------------------

    async def _history_loop(self) -> None:
        await self._feed_loop(
            layout.HISTORY_STREAM, layout.ENGINE_DURABLE, "history", self._history
        )

    async def _feed_loop(
        self,
        stream: str,
        durable: str,
        what: str,
        handle: Callable[[list[Delivery]], Awaitable[None]],
    ) -> None:
        """Fetch from a feed of ``durable`` and hand each batch to ``handle``, forever. The feed
        may keep a pull request waiting across fetches (``Transport.consume``): the engine
        takes every delivery it is given. A failed fetch, or a feed that could not be opened,
        is retried with a backoff; the feed is kept across failed fetches."""
        backoff = self._loop_backoff()
        while True:
            try:
                async with self.transport.consume(stream, durable, self.fetch_batch) as feed:
                    while True:
                        try:
                            deliveries = await feed.fetch(self.fetch_wait_s)
                        except TransportError as exc:
                            _say_fetch_failed(backoff, what, exc)
                            await trio.sleep(backoff.next_s())
                            continue
                        backoff.reset()
                        await handle(deliveries)
            except TransportError as exc:
                _say_fetch_failed(backoff, what, exc)
                await trio.sleep(backoff.next_s())

    async def _history(self, deliveries: list[Delivery]) -> None:
        if len(deliveries) == 1:
            # One event per fetch is the common case (a run waits on its step between events):
            # handled as a group of one without building the groups.
            d = deliveries[0]
            event = await self._decode(d)
            if event is not None:
                await self._handle_group([(d, event)])
            return
        groups: dict[str, list[tuple[Delivery, RunEvent]]] = {}
        for d in deliveries:
            event = await self._decode(d)
            if event is not None:
                groups.setdefault(event.run_id, []).append((d, event))
        # Runs are independent: handle them concurrently, each run's events in order. A
        # single run (the common case) is handled in place: a nursery and a task for it
        # would only cost scheduler passes on the run's critical path.
        if len(groups) == 1:
            for items in groups.values():
                await self._handle_group(items)
            return
        async with trio.open_nursery() as nursery:
            for items in groups.values():
                nursery.start_soon(self._handle_group, items)

    async def _decode(self, d: Delivery) -> RunEvent | None:
        try:
            event = decode_event(d.data)
            if d.subject != layout.history_subject(event.run_id):
                raise DecodeError(f"event for run {event.run_id!r} on subject {d.subject!r}")
        except DecodeError as exc:
            self.stats.malformed += 1
            self._counted()
            log.error(
                "terminating malformed history message %s seq %d: %s", d.subject, d.stream_seq, exc
            )
            await self._settle(d.term)
            return None
        return event

    async def _handle_group(self, items: list[tuple[Delivery, RunEvent]]) -> None:
        for d, event in items:
            try:
                await self._handle(d, event)
            except DecodeError as exc:
                self.stats.malformed += 1
                self._counted()
                log.error(
                    "run %s: unreadable snapshot or definition (%s); terminating event seq %d",
                    event.run_id,
                    exc,
                    d.stream_seq,
                )
                self._cache.pop(event.run_id, None)
                await self._settle(d.term)
            except TransportError as exc:
                log.warning(
                    "event %s seq %d: %s; will be redelivered", d.subject, d.stream_seq, exc
                )
                self._cache.pop(event.run_id, None)
                await self._settle(d.nak, ERROR_NAK_DELAY_S)
            except Exception:
                log.exception("event %s seq %d could not be handled", d.subject, d.stream_seq)
                self._cache.pop(event.run_id, None)
                await self._settle(d.nak, ERROR_NAK_DELAY_S)

    def _warn_legacy_once(self, event: RunEvent) -> None:
        """Said once per engine, and only when an old worker's event (no dispatch identity)
        actually arrives while they are accepted: then it matters, and not before."""
        if self._legacy_warned or not self.legacy_step_events:
            return
        if isinstance(event, StepCompleted | StepFailed | StepContinue | StepPaused) and (
            event.dispatch is None
        ):
            self._legacy_warned = True
            log.warning(
                "legacy_step_events is on and run %s got a step event without a dispatch "
                "identity (an old worker); set %s=false once every worker is upgraded",
                event.run_id,
                LEGACY_ENV_VAR,
            )

    async def _handle(self, d: Delivery, event: RunEvent) -> None:
        run_id = event.run_id
        self._warn_legacy_once(event)
        # Derived only on a first delivery: a redelivered start may have been applied already
        # (an answer lost after the save), which only the store can tell.
        derive = isinstance(event, WorkflowStarted) and d.num_delivered == 1
        for _ in range(CAS_ATTEMPTS_MAX):
            loaded = None
            derived = False
            if derive:
                assert isinstance(event, WorkflowStarted)
                derive = False  # once: after a failed compare-and-set, the store is read
                loaded = await self._derive_first(event)
                derived = loaded is not None
            if loaded is None:
                loaded = await self._load(run_id)
                if loaded is not None and isinstance(event, WorkflowStarted):
                    loaded = (self._kept_definition(loaded[0], event), *loaded[1:])
            from_cache = loaded is not None and loaded[2]
            snap, rev = (loaded[0], loaded[1]) if loaded is not None else (None, 0)
            definition: WorkflowDef | None = None
            if snap is None and isinstance(event, WorkflowStarted):
                definition = await self._load_definition(event.workflow)
            ctx = AdvanceContext(
                now_ms=self.env.wall_ms(),
                new_id=self.env.new_id,
                definition=definition,
                legacy_step_events=self.legacy_step_events,
                seq=d.stream_seq,
                # A cached snapshot is kept only once its effects are stored (below); a derived
                # first snapshot has no outbox, or the service's start (repeated, not saved on).
                outbox_stored=from_cache,
            )
            out = decide(snap, event, ctx)
            if out.snapshot is None:
                await self._missing_run(d, event)
                return
            if out.snapshot is snap:
                if from_cache and not out.replayed:
                    # A drop decided on a cached copy may be a stale cache (another engine moved
                    # the run on): confirm against the store before losing the event.
                    self._cache.pop(run_id, None)
                    continue
                if out.replayed:
                    self.stats.replayed += 1
                    self._counted()
                    await execute_effects(
                        self.transport, self.inputs, out.effects, encoder=self._encoder
                    )
                    kept = out.snapshot
                    if (derived or not from_cache) and (
                        kept.last_seq == d.stream_seq or service_start_entry(kept) is not None
                    ):
                        # The newest entry's effects are all stored now (a start the service
                        # decided, its tasks repeated; read, or derived from the event): kept,
                        # as after a save, so the run's next event is decided without a read.
                        self._remember(kept, rev)
                elif out.dropped is not None:
                    self.stats.dropped += 1
                    self._counted()
                    log.debug(
                        "dropped %s for run %s: %s", type(event).__name__, run_id, out.dropped
                    )
                self._ack(d)
                return
            try:
                saved, effects, new_rev = await self._save_decided(out, snap, rev, event, ctx)
            except (RevisionMismatch, KeyExists):
                self.stats.conflicts += 1
                self._counted()
                self._cache.pop(run_id, None)
                continue
            if not self._ends_run(saved, snap):  # a run end counts it (_save_and_end)
                self._count_applied()
            if hook_installed():  # a test's crash seam; production installs none
                await self._dispatch_saved(effects)
            await execute_effects(self.transport, self.inputs, effects, encoder=self._encoder)
            # Kept only now that its effects are stored: the next event decided on this copy
            # drops them from its outbox entry (AdvanceContext.outbox_stored). A failure above
            # drops the run's cached copy (_handle_group); so does a compare-and-set on the
            # older one left here, which fails.
            self._remember(saved, new_rev)
            self._ack(d)
            return
        log.warning(
            "run %s: %d compare-and-set conflicts in a row; redelivering", run_id, CAS_ATTEMPTS_MAX
        )
        await self._settle(d.nak, ERROR_NAK_DELAY_S)

    async def _save_decided(
        self,
        out: Outcome,
        snap: RunSnapshot | None,
        rev: int,
        event: RunEvent,
        ctx: AdvanceContext,
    ) -> tuple[RunSnapshot, tuple[Effect, ...], int]:
        """Save the decided snapshot; one too large to store ever (:class:`SnapshotTooLarge`)
        is replaced by the run failed on the stored one (``fail_too_large``), saved in its
        place. The snapshot saved, its effects and the new revision."""
        assert out.snapshot is not None
        try:
            return out.snapshot, out.effects, await self._save(out.snapshot, snap, rev)
        except SnapshotTooLarge as exc:
            if snap is None:
                raise
            failed = fail_too_large(snap, event, ctx, exc.size_bytes, exc.bound_bytes)
            log.error("%s; failing the run", exc)
            assert failed.snapshot is not None
            return failed.snapshot, failed.effects, await self._save(failed.snapshot, snap, rev)

    @staticmethod
    async def _dispatch_saved(effects: tuple[Effect, ...]) -> None:
        """The engine's crash seam: a dispatch is saved in the snapshot, its task not yet
        published (reached only when the event dispatched a task)."""
        first_task = next((e for e in effects if isinstance(e, PublishTask)), None)
        if first_task is None:
            return
        t = first_task.task
        await crash_point(
            SeamContext(
                Seam.ENGINE_AFTER_DISPATCH_SAVED,
                t.run_id,
                t.step_id,
                t.dispatch.iteration,
                t.dispatch.attempt,
            )
        )

    async def _missing_run(self, d: Delivery, event: RunEvent) -> None:
        self.stats.missing_run += 1
        self._counted()
        if d.num_delivered >= MISSING_RUN_MAX_DELIVERIES:
            log.error(
                "terminating %s for run %s: the run does not exist",
                type(event).__name__,
                event.run_id,
            )
            await self._settle(d.term)
        else:
            await self._settle(d.nak, MISSING_RUN_NAK_DELAY_S)

    # --- timers --------------------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        await self._feed_loop(layout.TIMER_STREAM, layout.TIMER_DURABLE, "timer", self._timers)

    async def _timers(self, deliveries: list[Delivery]) -> None:
        for d in deliveries:
            try:
                await self._handle_timer(d)
            except TransportError as exc:
                log.warning("timer %s: %s; will be redelivered", d.subject, exc)
                await self._settle(d.nak, ERROR_NAK_DELAY_S)

    async def _handle_timer(self, d: Delivery) -> None:
        try:
            due_ms = int(d.headers[TIMER_DUE_HEADER])
            tid = d.headers[TIMER_ID_HEADER]
            event = decode_event(d.data)
            if not isinstance(event, TimerFired):
                raise DecodeError(f"a timer must carry timer.fired, not {event.TYPE}")
        except (KeyError, ValueError) as exc:
            self.stats.malformed += 1
            self._counted()
            log.error("terminating malformed timer %s: %s", d.subject, exc)
            await self._settle(d.term)
            return
        remaining_ms = due_ms - self.env.wall_ms()
        if remaining_ms > 0:
            await self._settle(d.nak, max(remaining_ms / 1000.0, TIMER_MIN_NAK_S))
            return
        await self.transport.publish(layout.history_subject(event.run_id), d.data, msg_id=tid)
        self.stats.timers_fired += 1
        self._counted()
        self._ack(d)


def _say_fetch_failed(backoff: Backoff, what: str, exc: TransportError) -> None:
    """The first failure in a row is a warning; the rest of an outage is the transport's to
    report (it says once that NATS is unreachable and once that it is back)."""
    say = log.warning if backoff.failures == 0 else log.debug
    say("%s fetch failed: %s; retrying with backoff", what, exc)
