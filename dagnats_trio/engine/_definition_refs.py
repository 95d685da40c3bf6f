"""Run definitions stored once by their content, and the snapshots that name them.

Why: the engine saves a run's snapshot on every event (five times per scripted agent run), and a
snapshot that holds its workflow definition inline carries ~370 bytes that never change through
the run: paid again in every save's fsync (~30 us per KB with ``sync_interval: always``) and
delivered to every watcher of the runs bucket. So the engine stores the definition once, under
its content address (``snapshot.definition_ref``: a SHA-256 of its bytes) in ``workflow_defs``,
and its saves name it there (``encode_snapshot(..., definition_by_ref=True)``).

Safe because what is stored under a reference never changes: the key is the hash of the bytes,
written create-only, and nothing deletes it. A definition registered again under its name is
another reference; a run keeps the one it names. The definition is stored (and its write
acknowledged) before the first snapshot that names it, so every stored reference resolves. A
reader that finds a snapshot with a reference and no definition (a cold engine, a takeover, the
API) reads it once per process: :meth:`DefinitionRefs.resolve` keeps what it read, by
reference, bounded.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections import OrderedDict
from typing import Final, final

import trio

from ..dag import WorkflowDef
from ..protocol import DecodeError, from_json, layout
from ..transport import KeyExists, Transport
from ._replace import replace
from .snapshot import RunSnapshot, SnapshotEncoder

#: Definitions kept by reference, and references known stored, per process (least recently used
#: out): a miss costs one read (or one create-only write) of the definition.
DEFINITION_REFS_KEPT_MAX: Final = 256
#: What a reference is: a SHA-256 in lower-case hex. Anything else is refused before it names a
#: key.
_REF_SHAPE: Final = re.compile(r"[0-9a-f]{64}")


@final
class DefinitionRefs:
    """Stores definitions by reference (:meth:`store`) and resolves the references snapshots
    hold (:meth:`resolve`), each at most once per process while it is kept."""

    def __init__(self, transport: Transport, encoder: SnapshotEncoder | None = None) -> None:
        self._transport = transport
        #: Spells and hashes each definition object once: the owner's (an engine's, shared
        #: with its saves), else one of this instance's.
        self._encoder = encoder if encoder is not None else SnapshotEncoder()
        self._kept: OrderedDict[str, WorkflowDef] = OrderedDict()

    def stored(self, definition: WorkflowDef) -> bool:
        """Whether this process knows ``definition`` is stored under its reference."""
        ref = self._encoder.definition_ref(definition)
        if ref not in self._kept:
            return False
        self._kept.move_to_end(ref)
        return True

    async def store(self, definition: WorkflowDef) -> str:
        """Store ``definition`` under its reference (create-only: one there already is the
        same bytes) and return the reference."""
        ref = self._encoder.definition_ref(definition)
        with contextlib.suppress(KeyExists):  # stored before: the same bytes
            await self._transport.kv_create(
                layout.DEFS_BUCKET,
                layout.definition_ref_key(ref),
                self._encoder.definition_bytes(definition),
            )
        self._keep(ref, definition)
        return ref

    async def resolve(self, snapshot: RunSnapshot) -> RunSnapshot:
        """``snapshot`` with the definition it names by reference; as it is when it holds its
        definition (or names none). :class:`protocol.DecodeError` when the reference is not one,
        names nothing stored, or what is stored there is not its bytes."""
        ref = snapshot.definition_ref
        if snapshot.definition is not None or ref is None:
            await trio.lowlevel.checkpoint()
            return snapshot
        definition = self._kept.get(ref)
        if definition is None:
            definition = await self._read(snapshot.run_id, ref)
        else:
            self._kept.move_to_end(ref)
            await trio.lowlevel.checkpoint()
        return replace(snapshot, definition=definition)

    async def _read(self, run_id: str, ref: str) -> WorkflowDef:
        if _REF_SHAPE.fullmatch(ref) is None:
            raise DecodeError(f"run {run_id}: definition_ref {ref[:80]!r} is no reference")
        entry = await self._transport.kv_get(layout.DEFS_BUCKET, layout.definition_ref_key(ref))
        if entry is None or entry.value is None:
            raise DecodeError(f"run {run_id}: its definition {ref} is not stored")
        if hashlib.sha256(entry.value).hexdigest() != ref:
            raise DecodeError(f"run {run_id}: what is stored as definition {ref} is not it")
        definition: WorkflowDef = from_json(entry.value, WorkflowDef, "workflow definition")
        self._keep(ref, definition)
        return definition

    def _keep(self, ref: str, definition: WorkflowDef) -> None:
        self._kept[ref] = definition
        self._kept.move_to_end(ref)
        while len(self._kept) > DEFINITION_REFS_KEPT_MAX:
            self._kept.popitem(last=False)
