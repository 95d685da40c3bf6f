"""The service layer: every operation the REST and NATS endpoints offer, in one place.

The endpoints are thin shells that translate requests to these calls and the typed errors below
to status codes. Nothing here decides how a run moves; it records intent (a definition, a
``workflow.started``, a ``run.cancel_requested``) and reads the engine's snapshots. The one
exception is :meth:`Service.purge_run`, which removes a finished run (see :mod:`._purge`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs
import trio

from .._env import DEFAULT_ENV, RuntimeEnv
from ..dag import WorkflowDef
from ..engine import (
    DefinitionRefs,
    RunSnapshot,
    decode_snapshot,
    ensure_run_index,
)
from ..protocol import (
    CancelRequested,
    DecodedByBytes,
    DecodeError,
    InvalidId,
    JsonValue,
    RunStatus,
    SignalSent,
    check_id,
    encode_event,
    from_json,
    layout,
)
from ..transport import KvEntry, Transport
from ._purge import collect_tree, execute_plan, plan_purge, purge_orphan
from ._rest_views import NoWorker
from ._run_list import BadCursor, check_cursor, list_runs_page
from ._service_errors import InputTooLarge as InputTooLarge
from ._service_errors import InvalidRequest as InvalidRequest
from ._service_errors import RunNotFound as RunNotFound
from ._service_errors import RunRunning as RunRunning
from ._service_errors import RunWaitTimeout as RunWaitTimeout
from ._service_errors import ServiceError as ServiceError
from ._service_errors import WorkflowNotFound as WorkflowNotFound
from ._service_errors import json_bytes
from ._start import IDEMPOTENCY_KEY_MAX_CHARS as IDEMPOTENCY_KEY_MAX_CHARS
from ._start import IDEMPOTENCY_KEY_PREFIX as IDEMPOTENCY_KEY_PREFIX
from ._start import START_RUNS_IN_FLIGHT as START_RUNS_IN_FLIGHT
from ._start import RunStarts
from ._start import idempotency_kv_key as idempotency_kv_key
from ._start_bound import RUN_INPUT_MAX_BYTES as RUN_INPUT_MAX_BYTES
from ._start_bound import run_input_max_bytes as run_input_max_bytes
from ._unserved import UNSERVED_AFTER_S, unserved_steps

#: Most runs one ``list_runs`` call returns.
LIST_RUNS_LIMIT_MAX = 1_000
#: Runs per page when the caller names no limit.
LIST_RUNS_LIMIT_DEFAULT = 100
#: Longest ``wait_for_run`` a caller may ask for.
WAIT_FOR_RUN_MAX_S = 3_600.0
#: Longest ``wait_for_run`` trusts one watch before it reads the run again and opens a new one.
#: A watch is an ephemeral consumer on one node: a node killed, restarted or cut off takes it
#: along and nothing tells the watcher (the cluster chaos soak saw finished runs waited on
#: past their bound).
WAIT_FOR_RUN_RESYNC_S = 5.0
#: Prefix of the run snapshot keys in ``workflow_runs``.
RUN_KEY_PREFIX = "run."
#: Longest signal payload accepted, in bytes of JSON.
SIGNAL_PAYLOAD_MAX_BYTES = 1_048_576
#: Longest cancel reason accepted. It becomes the run's error, kept in its snapshot and shown in
#: every listing of the run; a reason near the body limit was accepted (202), and the snapshot
#: that holds it was then over the server's ``max_payload``, so the engine retried the cancel
#: forever and the run never ended (found from outside).
CANCEL_REASON_MAX_CHARS = 4096


@final
@attrs.frozen
class RunPage:
    """One page of runs; pass ``next_cursor`` back to get the next (None at the end)."""

    runs: tuple[RunSnapshot, ...]
    next_cursor: str | None


@final
class Service:
    def __init__(
        self,
        transport: Transport,
        env: RuntimeEnv = DEFAULT_ENV,
        *,
        unserved_after_s: float = UNSERVED_AFTER_S,
    ) -> None:
        if not unserved_after_s > 0:
            raise ValueError(f"unserved_after_s must be positive, got {unserved_after_s!r}")
        self.transport = transport
        self.env = env
        #: How long a dispatched step's task type may go unpolled before the run says so.
        self.unserved_after_s = unserved_after_s
        # Stores from before the run index get it once (engine.ensure_run_index); hosts do it
        # at start, this is for services embedded without one.
        self._index_ready = False
        self._index_lock = trio.Lock()
        #: The definitions read, decoded once per stored bytes (every start reads its
        #: definition; a frozen WorkflowDef is shared by the starts that read the same bytes).
        self.definitions: DecodedByBytes[WorkflowDef] = DecodedByBytes(
            WorkflowDef, "workflow definition"
        )
        #: The definitions that the engine's snapshots name by reference, read once each.
        self._definition_refs = DefinitionRefs(transport)
        self._starts = RunStarts(
            transport, env, self.definitions, self._workflow_and_revision, self._definition_of
        )

    # --- workflows -----------------------------------------------------------------------------

    async def register_workflow(self, definition: bytes | str | Mapping[str, Any]) -> WorkflowDef:
        """Validate and store; raises :class:`dag.WorkflowInvalid` listing every problem."""
        parsed = WorkflowDef.from_json(definition)
        await self.transport.kv_put(layout.DEFS_BUCKET, parsed.name, parsed.to_json())
        return parsed

    async def get_workflow(self, name: str, *, field: str = "name") -> WorkflowDef:
        """The definition; :class:`InvalidId` naming ``field`` when ``name`` is no id."""
        definition, _ = await self._workflow_and_revision(name, field)
        return definition

    async def _workflow_and_revision(self, name: str, field: str) -> tuple[WorkflowDef, int]:
        """The definition and the revision it is stored at (what a start names)."""
        check_id(field, name)
        return self._definition_of(name, await self.transport.kv_get(layout.DEFS_BUCKET, name))

    def _definition_of(self, name: str, entry: KvEntry | None) -> tuple[WorkflowDef, int]:
        """The definition and revision held by ``entry``, the read of ``name``: a name that
        holds none (or no definition) is forgotten (its starts no longer indexed early)."""
        if entry is None or entry.value is None:
            self.definitions.forget(name)
            raise WorkflowNotFound(name)
        try:
            return self.definitions.decode(name, entry.value), entry.revision
        except DecodeError:
            self.definitions.forget(name)  # no longer a name whose starts are indexed early
            raise

    async def list_workflows(self) -> list[WorkflowDef]:
        found = []
        for name in await self.transport.kv_keys(layout.DEFS_BUCKET):
            if name.startswith(layout.DEFINITION_REF_PREFIX):
                continue  # a run's definition by reference (engine.DefinitionRefs), no name
            try:
                found.append(await self.get_workflow(name))
            except (WorkflowNotFound, DecodeError, InvalidId):
                continue  # deleted meanwhile, or not ours
        return found

    # --- runs ----------------------------------------------------------------------------------

    async def start_run(
        self, workflow: str, input: JsonValue = None, idempotency_key: str | None = None
    ) -> str:
        """Start a run and return its id; the same ``idempotency_key`` returns the same id.

        The snapshot is written before ``workflow.started`` is published, so the run can be read
        as soon as this returns. Every step is idempotent, so a caller that retries after a
        failure (with its key) completes a half-done start instead of making a second run.
        """
        return await self._starts.start(workflow, input, idempotency_key)

    async def get_run(self, run_id: str) -> RunSnapshot:
        """The run's snapshot; :class:`InvalidId` when ``run_id`` is no id."""
        check_id("run_id", run_id)
        entry = await self.transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id))
        if entry is None or entry.value is None:
            raise RunNotFound(run_id)
        return await self.with_definition(decode_snapshot(entry.value))

    async def with_definition(self, snap: RunSnapshot) -> RunSnapshot:
        """``snap`` holding its run's definition: a snapshot the engine saved names it by
        reference (``engine.DefinitionRefs``), read here once per definition. Every snapshot
        this service returns, but a listing's, holds it; :class:`DecodeError` when it cannot
        be read."""
        return await self._definition_refs.resolve(snap)

    async def unserved_steps(self, snap: RunSnapshot) -> Mapping[str, NoWorker]:
        """``step id -> hint`` for the run's running steps whose task type no worker has polled
        for :attr:`unserved_after_s` (``api._unserved``); empty for a run that waits on none."""
        await trio.lowlevel.checkpoint()
        return await unserved_steps(self.transport, snap, self.env.wall_ms(), self.unserved_after_s)

    async def list_runs(
        self,
        workflow: str | None = None,
        status: RunStatus | str | None = None,
        limit: int = LIST_RUNS_LIMIT_DEFAULT,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs newest first (by start), filtered; ``cursor`` is ``next_cursor`` of the previous
        page (with the same filters). See :mod:`._run_list` for how a page is read. A listed
        snapshot that names its definition by reference is not resolved (a page shows no
        definition): :meth:`with_definition` does it."""
        if not 1 <= limit <= LIST_RUNS_LIMIT_MAX:
            raise InvalidRequest(f"limit must be between 1 and {LIST_RUNS_LIMIT_MAX}")
        wanted: RunStatus | None
        try:
            wanted = RunStatus(status) if isinstance(status, str) else status
        except ValueError:
            names = ", ".join(s.value for s in RunStatus)
            raise InvalidRequest(f"unknown status {status!r} (one of {names})") from None
        try:
            check_cursor(wanted, cursor)
        except BadCursor as exc:
            raise InvalidRequest(str(exc)) from None
        if not self._index_ready:
            async with self._index_lock:
                if not self._index_ready:
                    await ensure_run_index(self.transport)
                    self._index_ready = True
        try:
            page = await list_runs_page(
                self.transport, workflow=workflow, status=wanted, limit=limit, cursor=cursor
            )
        except BadCursor as exc:
            raise InvalidRequest(str(exc)) from None
        return RunPage(page.runs, page.next_cursor)

    async def cancel_run(self, run_id: str, reason: str = "cancelled") -> RunSnapshot:
        """Ask the engine to cancel; returns the snapshot as it was (cancel is asynchronous).
        :class:`InvalidRequest` for a ``reason`` over :data:`CANCEL_REASON_MAX_CHARS`."""
        if len(reason) > CANCEL_REASON_MAX_CHARS:
            raise InvalidRequest(
                f"reason is {len(reason)} characters; the limit is {CANCEL_REASON_MAX_CHARS}"
            )
        snap = await self.get_run(run_id)
        if not snap.status.finished:
            await self.transport.publish(
                layout.history_subject(run_id),
                encode_event(CancelRequested(run_id, reason)),
                msg_id=f"{run_id}.cancel",
            )
        return snap

    async def send_signal(self, run_id: str, name: str, payload: JsonValue = None) -> None:
        """Store the signal in KV ``signals`` (where handlers read it) and record it in history."""
        check_id("name", name)
        stored = json_bytes(payload, "payload")
        await self.get_run(run_id)
        data = encode_event(SignalSent(run_id, name, payload))
        if len(data) > SIGNAL_PAYLOAD_MAX_BYTES:
            raise InvalidRequest(f"signal payload is larger than {SIGNAL_PAYLOAD_MAX_BYTES} bytes")
        await self.transport.kv_put(layout.SIGNALS_BUCKET, layout.signal_key(run_id, name), stored)
        await self.transport.publish(layout.history_subject(run_id), data)

    async def get_signal(self, run_id: str, name: str) -> JsonValue:
        """The last payload sent as signal ``name`` (None when none was)."""
        check_id("run_id", run_id)
        check_id("name", name)
        entry = await self.transport.kv_get(layout.SIGNALS_BUCKET, layout.signal_key(run_id, name))
        if entry is None or entry.value is None:
            return None
        return from_json(entry.value, Any, "signal payload")

    async def purge_run(self, run_id: str) -> tuple[str, ...]:
        """Remove a finished run and every trace of it: history, leftover tasks and timers,
        journals, checkpoints, signals, inputs, the idempotency key, and the child runs of its
        sub-workflow steps (children first). Returns the ids of the runs purged, the run last.

        :class:`RunRunning` when the run or a child has not finished; :class:`RunNotFound` for
        an unknown (or already purged) run. Interrupted, it can simply be called again: the
        snapshot of a run goes last, and every other step is idempotent.
        """
        root = await self.get_run(run_id)
        tree = await collect_tree(root, self._find_run)
        if tree.truncated:
            raise InvalidRequest(
                f"run {run_id!r} has more nested child runs than one purge removes"
            )
        for snap in tree.runs:
            if not snap.status.finished:
                raise RunRunning(run_id, snap.run_id)
        for orphan in tree.orphans:
            await purge_orphan(self.transport, orphan)
        for snap in tree.runs:
            definition = snap.definition or await self._definition_or_none(snap.workflow)
            idem = (
                idempotency_kv_key(snap.idempotency_key)
                if snap.idempotency_key is not None
                else None
            )
            await execute_plan(self.transport, plan_purge(snap, definition, idem))
        return tuple(s.run_id for s in tree.runs)

    async def _find_run(self, run_id: str) -> RunSnapshot | None:
        try:
            return await self.get_run(run_id)
        except RunNotFound:
            return None

    async def _definition_or_none(self, name: str) -> WorkflowDef | None:
        try:
            return await self.get_workflow(name)
        except (WorkflowNotFound, DecodeError):
            return None

    async def wait_for_run(self, run_id: str, timeout_s: float) -> RunSnapshot:
        """The snapshot once the run has finished; :class:`RunWaitTimeout` after ``timeout_s``."""
        if not 0 < timeout_s <= WAIT_FOR_RUN_MAX_S:
            raise InvalidRequest(f"timeout must be in (0, {WAIT_FOR_RUN_MAX_S}] seconds")
        key = layout.run_key(check_id("run_id", run_id))
        with trio.move_on_after(timeout_s):
            while True:
                with trio.move_on_after(WAIT_FOR_RUN_RESYNC_S):
                    snap = await self._watch_until_finished(run_id, key)
                    if snap is not None:
                        return snap
                    await trio.sleep_forever()  # a watch that ended: the next read is due
        raise RunWaitTimeout(run_id, timeout_s)

    async def _watch_until_finished(self, run_id: str, key: str) -> RunSnapshot | None:
        # Watch first, then read: a change between the two is seen by the watch.
        async with self.transport.kv_watch(layout.RUNS_BUCKET, key) as changes:
            snap = await self.get_run(run_id)
            if snap.status.finished:
                return snap
            async for entry in changes:
                if entry.key != key or entry.value is None:
                    continue
                snap = decode_snapshot(entry.value)
                if snap.status.finished:
                    return await self.with_definition(snap)
        return None
