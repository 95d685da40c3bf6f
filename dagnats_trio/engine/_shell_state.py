"""What an engine holds: its options, its counters, the run snapshots it caches, and how it settles.

:class:`EngineState` is the base of :class:`~dagnats_trio.engine._shell.Engine`; the engine's loops
(history in, one compare-and-set, effects out, ack; timers) are in ``_shell``. Here are what they
share: the options and counters, the snapshot cache in front of the runs bucket (the revision
this process wrote, so the hot path reads nothing), the first snapshot derived from a start, and
the acks and naks whose failure only means a redelivery.
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any, final

import attrs
import trio

from .._env import DEFAULT_ENV, Backoff, RuntimeEnv
from ..dag import WorkflowDef
from ..nats import DEFAULT_MAX_PAYLOAD_BYTES
from ..protocol import WorkflowStarted, layout
from ..transport import Delivery, Transport, TransportError
from ._definition_refs import DefinitionRefs
from ._definitions import Definitions
from ._replace import replace
from ._run_end import end_run
from ._run_ends import RunEnd, RunEnds
from ._start_sweep import START_SWEEP_AFTER_S, START_SWEEP_EVERY_S, StartSweep
from ._store import create_snapshot, started_with
from .hooks import InputsHooks, NoInputs
from .snapshot import RunSnapshot, SnapshotEncoder, decode_snapshot

log = logging.getLogger("dagnats_trio.engine")

#: Environment variable holding the default of ``legacy_step_events``.
LEGACY_ENV_VAR = "DAGNATS_LEGACY_STEP_EVENTS"
#: AckWait of the shared history consumer: an event left by a crashed engine comes back after it.
ENGINE_ACK_WAIT_S = 10.0
#: AckWait of the timer consumer.
TIMER_ACK_WAIT_S = 10.0
#: Deliveries asked for per fetch.
FETCH_BATCH = 64
#: How long one fetch waits for a first message.
FETCH_WAIT_S = 1.0
#: Snapshots kept in memory (with the revision this engine wrote).
SNAPSHOT_CACHE_RUNS_MAX = 2_048
#: First pause of a fetch loop after a transport error, so a broken server is not spun on.
LOOP_ERROR_BACKOFF_S = 0.5
#: Cap of that pause, doubling (and jittered) while the errors go on: an outage of any length.
LOOP_ERROR_BACKOFF_MAX_S = 5.0
#: Room left beside a snapshot in a message for its headers (the compare-and-set's expected
#: revision): nats-server bounds a message's headers and payload together by ``max_payload``.
SNAPSHOT_HEADER_ROOM_BYTES = 4096


def snapshot_max_bytes(max_payload_bytes: int) -> int:
    """The most a run's snapshot may encode to and be saved, on a server whose ``max_payload``
    is ``max_payload_bytes`` (``Transport.max_payload_bytes``, as the server announces it):
    that less :data:`SNAPSHOT_HEADER_ROOM_BYTES`. A larger one fails its run
    (:class:`SnapshotTooLarge`, ``core.fail_too_large``); its save would fail on every retry."""
    return max_payload_bytes - SNAPSHOT_HEADER_ROOM_BYTES


#: :func:`snapshot_max_bytes` on a server of the default ``max_payload`` (1 MiB), for docs and
#: callers with no transport at hand; the engine bounds by what its server announces.
SNAPSHOT_MAX_BYTES = snapshot_max_bytes(DEFAULT_MAX_PAYLOAD_BYTES)


@final
class SnapshotTooLarge(Exception):
    """A decided snapshot encodes to more than the bound (:func:`snapshot_max_bytes`): raised
    before any request, so nothing was written."""

    def __init__(self, run_id: str, size_bytes: int, bound_bytes: int) -> None:
        super().__init__(f"run {run_id}: snapshot of {size_bytes} bytes, over {bound_bytes}")
        self.size_bytes = size_bytes
        self.bound_bytes = bound_bytes


def legacy_from_env(environ: Any = None) -> bool:
    """``DAGNATS_LEGACY_STEP_EVENTS``: false for 0/false/no/off, true otherwise (default true)."""
    value = (environ if environ is not None else os.environ).get(LEGACY_ENV_VAR)
    if value is None:
        return True
    return value.strip().lower() not in {"0", "false", "no", "off"}


@final
@attrs.define
class EngineStats:
    """Counters for tests and operators (this process only)."""

    applied: int = 0
    dropped: int = 0
    replayed: int = 0
    conflicts: int = 0
    malformed: int = 0
    missing_run: int = 0
    timers_fired: int = 0
    #: Runs whose first snapshot was derived from their ``workflow.started`` instead of read.
    derived: int = 0


class EngineState:
    """The state of an :class:`~dagnats_trio.engine._shell.Engine` and the snapshot store it
    reads and writes through its cache."""

    def __init__(
        self,
        transport: Transport,
        *,
        env: RuntimeEnv = DEFAULT_ENV,
        inputs: InputsHooks | None = None,
        legacy_step_events: bool | None = None,
        ack_wait_s: float = ENGINE_ACK_WAIT_S,
        timer_ack_wait_s: float = TIMER_ACK_WAIT_S,
        fetch_batch: int = FETCH_BATCH,
        fetch_wait_s: float = FETCH_WAIT_S,
        start_sweep_after_s: float = START_SWEEP_AFTER_S,
        start_sweep_every_s: float = START_SWEEP_EVERY_S,
    ) -> None:
        self.transport = transport
        self.env = env
        self.inputs: InputsHooks = inputs if inputs is not None else NoInputs()
        self.legacy_step_events = (
            legacy_from_env() if legacy_step_events is None else legacy_step_events
        )
        self.ack_wait_s = ack_wait_s
        self.timer_ack_wait_s = timer_ack_wait_s
        self.fetch_batch = fetch_batch
        self.fetch_wait_s = fetch_wait_s
        self._legacy_warned = False
        self.stats = EngineStats()
        #: Made by a waiter of :meth:`wait_stats` only: a count with no one waiting allocates
        #: nothing (one per event otherwise, on the engine's hot path).
        self._stats_changed: trio.Event | None = None
        self._cache: OrderedDict[str, tuple[RunSnapshot, int]] = OrderedDict()
        self._definitions = Definitions(transport)
        #: Spells each run's definition and carried outbox entries once, not on every save.
        self._encoder = SnapshotEncoder()
        self._refs = DefinitionRefs(transport, self._encoder)
        #: Finished runs' removals, made by a task of their own (``_run_ends``).
        self._run_ends = RunEnds(transport)
        #: Publishes the ``workflow.started`` of runs whose start died (``_start_sweep``).
        self.start_sweep = StartSweep(
            transport, after_s=start_sweep_after_s, every_s=start_sweep_every_s
        )

    async def wait_stats(self, predicate: Callable[[EngineStats], bool]) -> None:
        """Return once ``predicate(self.stats)`` holds (the caller bounds the wait)."""
        while not predicate(self.stats):
            if self._stats_changed is None:
                self._stats_changed = trio.Event()
            await self._stats_changed.wait()

    def _counted(self) -> None:
        changed = self._stats_changed
        if changed is not None:
            self._stats_changed = None
            changed.set()

    def _count_applied(self) -> None:
        self.stats.applied += 1
        self._counted()

    @staticmethod
    def _ends_run(new: RunSnapshot, old: RunSnapshot | None) -> bool:
        """Whether saving ``new`` over ``old`` ends the run: its removals follow the save
        (``_run_end``), and its event is counted applied once they are made."""
        return old is not None and new.status.finished and not old.status.finished

    async def _derive_first(self, event: WorkflowStarted) -> tuple[RunSnapshot, int, bool] | None:
        """The run's first snapshot derived from the event that names it (``started_with``:
        why using it is safe), the service's dispatch in it or not, unless this engine holds
        the run already; counted as a cached copy, so a drop decided on it is confirmed against
        the store. The definition is the one kept at the event's revision, else read once (None
        if it moved on)."""
        if event.run_id in self._cache or event.definition_revision is None:
            return None
        definition = self._definitions.kept(event.workflow, event.definition_revision)
        names_snapshot = event.snapshot_revision is not None or event.dispatched is not None
        if definition is None and names_snapshot:
            current = await self._definitions.current(event.workflow)
            if current is not None and current[1] == event.definition_revision:
                definition = current[0]
        derived = started_with(event, definition)
        if derived is None:
            return None
        self.stats.derived += 1
        return derived[0], derived[1], True

    def _kept_definition(self, snap: RunSnapshot, event: WorkflowStarted) -> RunSnapshot:
        """``snap`` (read for ``event``) holding the definition object this engine keeps, when
        its inline one (a first snapshot: the service wrote it) equals the one kept at the
        revision the event names. Decoded, it is a new object per run, and a snapshot's
        definition text and reference are memoised by the object (this engine's
        ``SnapshotEncoder``): the kept one has them already, so the run's saves do not spell
        and hash it again."""
        if snap.definition is None or event.definition_revision is None:
            return snap
        kept = self._definitions.kept(event.workflow, event.definition_revision)
        if kept is None or kept is snap.definition or kept != snap.definition:
            return snap
        return replace(snap, definition=kept)

    async def _load(self, run_id: str) -> tuple[RunSnapshot, int, bool] | None:
        cached = self._cache.get(run_id)
        if cached is not None:
            self._cache.move_to_end(run_id)
            return cached[0], cached[1], True
        entry = await self.transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id))
        if entry is None or entry.value is None:
            return None
        snap = decode_snapshot(entry.value)
        if snap.definition is None and snap.definition_ref is not None:
            snap = await self._refs.resolve(snap)  # once per definition and process
        return snap, entry.revision, False

    def _save(
        self, new: RunSnapshot, old: RunSnapshot | None, rev: int
    ) -> Coroutine[Any, Any, int]:
        """The coroutine that saves ``new`` (awaited at once): for a run that goes on, the
        compare-and-set's own, with no frame of this method in between (one frame fewer passed
        through when the answer wakes the event's handling).

        A compare-and-set names the run's definition by reference (``_definition_refs``), which
        is stored first, once per definition and process. A create (a run whose service wrote
        no snapshot) holds it inline, as the service's does. A snapshot over
        :func:`snapshot_max_bytes` of the server's ``max_payload`` (read on each save: a
        reconnect may reach a server configured otherwise) raises :class:`SnapshotTooLarge`
        (the caller fails the run)."""
        if old is None:
            return create_snapshot(self.transport, new, encoder=self._encoder)
        if new.definition is not None and not self._refs.stored(new.definition):
            return self._store_definition_and_save(new, old, rev)
        data = self._encoder.encode(new, definition_by_ref=True)
        bound = snapshot_max_bytes(self.transport.max_payload_bytes)
        if len(data) > bound:
            raise SnapshotTooLarge(new.run_id, len(data), bound)
        update = self.transport.kv_update(layout.RUNS_BUCKET, layout.run_key(new.run_id), data, rev)
        if self._ends_run(new, old):
            return self._save_and_end(update, new)
        return update

    async def _store_definition_and_save(self, new: RunSnapshot, old: RunSnapshot, rev: int) -> int:
        assert new.definition is not None
        await self._refs.store(new.definition)  # acknowledged before a snapshot names it
        return await self._save(new, old, rev)

    async def _save_and_end(self, update: Coroutine[Any, Any, int], new: RunSnapshot) -> int:
        """Save a finished run, then hand its removals to the run-end task (``_run_ends``),
        which counts the event applied once they are made; made here when it cannot take
        them (not running, or its queue full)."""
        saved = await update
        # After the save (see _run_end).
        if not self._run_ends.hand_off(RunEnd(new.run_id, new.timers_armed, self._count_applied)):
            await end_run(self.transport, new.run_id, timers_armed=new.timers_armed)
            self._count_applied()
        return saved

    def _remember(self, snap: RunSnapshot, rev: int) -> None:
        if snap.status.finished:
            self._cache.pop(snap.run_id, None)
            return
        self._cache[snap.run_id] = (snap, rev)
        self._cache.move_to_end(snap.run_id)
        while len(self._cache) > SNAPSHOT_CACHE_RUNS_MAX:
            self._cache.popitem(last=False)

    async def _load_definition(self, name: str) -> WorkflowDef | None:
        current = await self._definitions.current(name)
        return current[0] if current is not None else None

    # --- helpers -------------------------------------------------------------------------------

    def _loop_backoff(self) -> Backoff:
        return Backoff(LOOP_ERROR_BACKOFF_S, LOOP_ERROR_BACKOFF_MAX_S, self.env.random)

    @staticmethod
    def _ack(d: Delivery) -> None:
        """Ack without waiting for the server (``ack_nowait``: queued, not even a scheduler
        pass); a failure here only means the server will redeliver.

        Each ack is queued only after every effect of the event is stored, so a lost ack is a
        redelivery, which the outbox replays idempotently (tasks and events carry msg ids; the
        acceptance rule drops the rest), and a dropped or replayed event is dropped or replayed
        again. Waiting would only add a round trip before the next fetch.
        """
        try:
            d.ack_nowait()
        except TransportError as exc:
            log.debug("settling a delivery failed: %s", exc)

    @staticmethod
    async def _settle(fn: Any, *args: Any) -> None:
        """Nak/term: a failure here only means the server will redeliver."""
        try:
            await fn(*args)
        except TransportError as exc:
            log.debug("settling a delivery failed: %s", exc)
