"""How a run starts: its definition read, its idempotency key claimed, its run index written,
its first snapshot created, its ``workflow.started`` published; in that order of durability.

A start waits on each of these in a row unless a promise allows two at once: for a workflow the
service has read before, the index writes (or the key's claim) go beside the definition's read
(``engine.index_start``), since a start refused then takes them back (or leaves the key as a
crash would). The snapshot always follows the index (a listing never hides a run) and
``workflow.started`` the snapshot (it names the snapshot's revision). docs/listing.md has the
crash table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Final, final

import attrs
import trio

from .._concurrency import run_all
from .._env import RuntimeEnv
from ..dag import WorkflowDef
from ..engine import (
    IndexedStart,
    SnapshotEncoder,
    index_start,
    start_dispatched,
    started_publish_msg,
    write_first_snapshot,
)
from ..protocol import (
    DecodedByBytes,
    JsonValue,
    WorkflowStarted,
    check_id,
    layout,
)
from ..transport import KeyExists, KvEntry, Transport
from ._service_errors import InvalidRequest, json_bytes
from ._start_bound import check_input_fits

#: Prefix of idempotency keys in ``workflow_runs`` (value: the run id they started).
IDEMPOTENCY_KEY_PREFIX: Final = "idem."
#: Longest idempotency key accepted.
IDEMPOTENCY_KEY_MAX_CHARS: Final = 512
#: Most run starts one service has in NATS at once; the others wait their turn in the process.
#: Each NATS request has a deadline (the transport's request timeout) counted from when it is
#: sent: a burst of hundreds of starts sent at once queued behind each other's durable writes on
#: the server, and on a loaded machine the last ones timed out and were answered 503. Waiting
#: here costs no deadline, so a burst is slow under load but refuses no start.
START_RUNS_IN_FLIGHT: Final = 32

#: Reads a workflow's definition and the revision it is stored at, by name; the second argument
#: names the request field that carried the name (for the error of a malformed one).
ReadDefinition = Callable[[str, str], Awaitable[tuple[WorkflowDef, int]]]
#: The definition and revision a read of the name (the first argument) found, as
#: :data:`ReadDefinition` returns them; raises as it does for a name that holds none.
DefinitionOf = Callable[[str, KvEntry | None], tuple[WorkflowDef, int]]


@final
class RunStarts:
    """The starts of one service, :data:`START_RUNS_IN_FLIGHT` in NATS at once.

    ``definitions`` is the service's cache of the definitions it has read: a name in it is one
    whose starts are indexed while its definition is read again.
    """

    def __init__(
        self,
        transport: Transport,
        env: RuntimeEnv,
        definitions: DecodedByBytes[WorkflowDef],
        read_definition: ReadDefinition,
        definition_of: DefinitionOf,
    ) -> None:
        self._transport = transport
        self._env = env
        self._definitions = definitions
        self._read_definition = read_definition
        self._definition_of = definition_of
        # The service's starts spell each definition they write once, not once per run.
        self._encoder = SnapshotEncoder()
        self._in_flight = trio.CapacityLimiter(START_RUNS_IN_FLIGHT)

    async def start(self, workflow: str, input: JsonValue, idempotency_key: str | None) -> str:
        """What :meth:`Service.start_run <.service.Service.start_run>` does (see there)."""
        input_size = len(json_bytes(input, "input"))
        limiter = self._in_flight
        try:
            # A free place costs no scheduler step of its own: the start's requests (the first
            # one is the definition's read) wait on the server, which is the checkpoint.
            limiter.acquire_nowait()
        except trio.WouldBlock:
            await limiter.acquire()
        try:
            return await self._start(workflow, input, idempotency_key, input_size)
        finally:
            limiter.release()

    async def _start(
        self, workflow: str, input: JsonValue, idempotency_key: str | None, input_size: int
    ) -> str:
        """The start, its input checked against the run's first snapshot
        (:func:`._start_bound.check_input_fits`) before anything is written: for a workflow
        read before, against the kept definition, and again when the read finds another."""
        known = self._definitions.kept(workflow)
        if known is not None and known.name == workflow:
            check_input_fits(
                known, input, input_size, self._transport.max_payload_bytes, idempotency_key
            )
            if idempotency_key is None:
                return await self._start_indexed_early(workflow, input, known, input_size)
            return await self._start_claimed_early(
                workflow, input, idempotency_key, known, input_size
            )
        definition, definition_revision = await self._read_definition(workflow, "workflow")
        check_input_fits(
            definition, input, input_size, self._transport.max_payload_bytes, idempotency_key
        )
        run_id = check_id("run_id", self._env.new_id())
        if idempotency_key is not None:
            run_id = await self._claim_idempotency_key(idempotency_key, run_id)
        event = WorkflowStarted(
            run_id=run_id,
            workflow=definition.name,
            input=input,
            idempotency_key=idempotency_key,
            started_at_ms=self._env.wall_ms(),
        )
        return await self._create_and_announce(event, definition, definition_revision)

    async def _start_indexed_early(
        self, workflow: str, input: JsonValue, known: WorkflowDef, input_size: int
    ) -> str:
        """A start of a workflow this service has read before: the run is indexed while the
        definition is read (``engine.index_start``: the read and the index's two writes sent
        at once, no task of their own), one waited round trip fewer.

        Only for a name read before, so a start of a name never registered (a fuzzer's) writes
        nothing; one deleted since is refused as before, its index writes taken back. Not with
        an idempotency key: the run id is known only once the key is claimed.
        """
        event = WorkflowStarted(
            run_id=check_id("run_id", self._env.new_id()),
            workflow=workflow,
            input=input,
            started_at_ms=self._env.wall_ms(),
        )
        read: list[tuple[WorkflowDef, int]] = []

        def take(entry: KvEntry | None) -> None:
            found = self._definition_of(workflow, entry)
            if found[0] is not known:
                # Registered again since: measured against the new one (a refusal here takes
                # the index writes back, as a deleted workflow's does).
                check_input_fits(found[0], input, input_size, self._transport.max_payload_bytes)
            read.append(found)

        indexed = await index_start(self._transport, event, take)
        definition, definition_revision = read[0]
        if definition.name != workflow:
            # The name stored in the definition is the run's (as on the other path); the run
            # is then indexed again, under it, by ``create_snapshot``.
            event = attrs.evolve(event, workflow=definition.name)
        return await self._create_and_announce(
            event, definition, definition_revision, indexed, dispatch=True
        )

    async def _start_claimed_early(
        self, workflow: str, input: JsonValue, key: str, known: WorkflowDef, input_size: int
    ) -> str:
        """A start with an idempotency key of a workflow this service has read before: the key
        is claimed while the definition is read, one waited round trip fewer.

        A definition deleted since refuses the start as before but leaves the key claimed, as a
        crash after the claim does: a retry with the key (once the workflow is back) completes
        that run. Only starts in flight when a workflow is deleted can leave one (the name is
        forgotten then), and a name never read reads first and claims nothing.
        """
        claimed: list[str] = []
        read: list[tuple[WorkflowDef, int]] = []

        async def claim() -> None:
            run_id = check_id("run_id", self._env.new_id())
            claimed.append(await self._claim_idempotency_key(key, run_id))

        async def read_definition() -> None:
            read.append(await self._read_definition(workflow, "workflow"))

        await run_all([claim, read_definition], in_flight_max=2)
        (definition, definition_revision), (run_id,) = read[0], claimed
        if definition is not known:
            # Registered again since the check on the kept one: a refusal leaves the key
            # claimed, as a deleted workflow's does (above).
            check_input_fits(definition, input, input_size, self._transport.max_payload_bytes, key)
        event = WorkflowStarted(
            run_id=run_id,
            workflow=definition.name,
            input=input,
            idempotency_key=key,
            started_at_ms=self._env.wall_ms(),
        )
        return await self._create_and_announce(
            event, definition, definition_revision, dispatch=True
        )

    async def _create_and_announce(
        self,
        event: WorkflowStarted,
        definition: WorkflowDef,
        definition_revision: int,
        indexed: IndexedStart | None = None,
        *,
        dispatch: bool = False,
    ) -> str:
        """Write the run's first snapshot, then publish its ``workflow.started``.

        With ``dispatch`` (a workflow this service has read before) the snapshot is written
        with the decision on the start applied, when that decision is tasks only, and its
        tasks are published with the event (``engine.start_dispatched``): the engine's
        compare-and-set and its hop are then off the run's critical path. A first start of a
        workflow keeps the engine's dispatch: it reads the definition first, and the crash
        matrix (tests/matrix) kills the engine between that dispatch's save and its publish.
        """
        run_id = event.run_id
        if dispatch and await start_dispatched(
            self._transport,
            attrs.evolve(event, definition_revision=definition_revision),
            definition,
            self._env.new_id,
            indexed=indexed,
            encoder=self._encoder,
        ):
            return run_id
        # The engine's function writes it; on a retry with the same idempotency key the run is
        # already recorded and its snapshot is left as it is. When this start wrote it, the
        # event names its revision and the definition's, so the engine derives the snapshot
        # instead of reading it (``engine._store.started_with``).
        revision = await write_first_snapshot(
            self._transport, event, definition, indexed=indexed, encoder=self._encoder
        )
        if revision is not None:
            event = attrs.evolve(
                event, snapshot_revision=revision, definition_revision=definition_revision
            )
        msg = started_publish_msg(event)
        await self._transport.publish(msg.subject, msg.data, msg_id=msg.msg_id)
        return run_id

    async def _claim_idempotency_key(self, key: str, run_id: str) -> str:
        if not key or len(key) > IDEMPOTENCY_KEY_MAX_CHARS:
            raise InvalidRequest(
                f"idempotency key must be 1-{IDEMPOTENCY_KEY_MAX_CHARS} characters"
            )
        kv_key = idempotency_kv_key(key)
        try:
            await self._transport.kv_create(layout.RUNS_BUCKET, kv_key, run_id.encode())
            return run_id
        except KeyExists:
            entry = await self._transport.kv_get(layout.RUNS_BUCKET, kv_key)
            if entry is None or entry.value is None:  # deleted between the two calls
                return await self._claim_idempotency_key(key, run_id)
            return entry.value.decode()


def idempotency_kv_key(key: str) -> str:
    """Where ``workflow_runs`` keeps the run an idempotency key started (hashed: any length)."""
    return IDEMPOTENCY_KEY_PREFIX + hashlib.sha256(key.encode()).hexdigest()
