"""The part of a run snapshot every reader may rely on (the engine owns the full shape)."""

from __future__ import annotations

import enum
from typing import final

import attrs

from ._codec import from_json, to_json


class RunStatus(enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def __init__(self, value: str) -> None:
        #: Whether a run in this status has ended (every status but running). An attribute set
        #: once per member, not a property: the engine and the watchers ask it on every
        #: snapshot they save or see, and a property is a Python call each time.
        self.finished = value != "running"


@final
@attrs.frozen
class RunHeader:
    """Decodes only ``run_id`` and ``status`` of a snapshot in KV ``workflow_runs`` at
    ``run.{run}``; the worker's heartbeat uses it to learn that a run was cancelled."""

    run_id: str
    status: RunStatus


def decode_run_header(data: bytes) -> RunHeader:
    return from_json(data, RunHeader, "run snapshot")


@final
@attrs.frozen
class RunIndexEntry:
    """A run's line in the run index (stream ``RUN_INDEX`` at ``runindex.{run}``, and while the
    run may be running, stream ``RUN_ACTIVE`` at ``runactive.{run}``).

    Written once, when the run's first snapshot is created, so the index stream's sequence is
    the runs' start order and a page of runs, newest first, is read from its end. It carries what
    a listing filters on without reading the snapshot (the workflow); the status lives in the
    snapshot, which stays the truth.
    """

    run_id: str
    workflow: str
    created_at_ms: int


def encode_run_index_entry(entry: RunIndexEntry) -> bytes:
    return to_json(entry)


def decode_run_index_entry(data: bytes) -> RunIndexEntry:
    """Raises :class:`DecodeError` on anything that is not an index entry."""
    return from_json(data, RunIndexEntry, "run index entry")
