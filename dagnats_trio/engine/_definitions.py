"""The workflow definitions the engine has read, each with its KV revision.

A definition may be registered again at any time, so a start that names no revision reads the
current one. A ``workflow.started`` that names the revision its service used
(``definition_revision``) is served from here when this engine already read that revision: a KV
revision names one write, so the bytes are the ones the service read. See ``_store`` for why the
engine wants it (the run's first snapshot, derived instead of read).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Final, final

import trio

from ..dag import WorkflowDef
from ..protocol import DecodeError, from_json, is_id, layout
from ..transport import Transport

log = logging.getLogger("dagnats_trio.engine")

#: Definitions kept in memory (the last revision read of each name, least recently used out).
DEFINITIONS_KEPT_MAX: Final = 256


@final
class Definitions:
    """The last revision read of each definition, by name (bounded, least recently used out)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._kept: OrderedDict[str, tuple[WorkflowDef, int]] = OrderedDict()

    def kept(self, name: str, revision: int) -> WorkflowDef | None:
        """The definition ``name`` stored at ``revision`` if this engine read that revision."""
        found = self._kept.get(name)
        if found is None or found[1] != revision:
            return None
        self._kept.move_to_end(name)
        return found[0]

    async def current(self, name: str) -> tuple[WorkflowDef, int] | None:
        """Read the current definition and its revision (kept for :meth:`kept`); None when
        ``name`` is no id, or nothing readable is stored under it."""
        if not is_id(name):
            await trio.lowlevel.checkpoint()
            return None
        entry = await self._transport.kv_get(layout.DEFS_BUCKET, name)
        if entry is None or entry.value is None:
            self._kept.pop(name, None)
            return None
        try:
            definition: WorkflowDef = from_json(entry.value, WorkflowDef, "workflow definition")
        except DecodeError as exc:
            log.error("stored definition of %s is unreadable: %s", name, exc)
            self._kept.pop(name, None)
            return None
        self._kept[name] = (definition, entry.revision)
        self._kept.move_to_end(name)
        while len(self._kept) > DEFINITIONS_KEPT_MAX:
            self._kept.popitem(last=False)
        return definition, entry.revision
