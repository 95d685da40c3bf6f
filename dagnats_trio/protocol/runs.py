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


#: The finished statuses as a snapshot's JSON text holds them: the JSON strings of their values
#: (the Hypothesis test of ``may_be_finished`` fails for a finished status missing here).
_COMPLETED_TEXT, _FAILED_TEXT, _CANCELLED_TEXT = (
    f'"{s.value}"'.encode() for s in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)
)


def may_be_finished(data: bytes) -> bool:
    """False only when the snapshot ``data`` cannot hold a finished status, decided on its bytes
    without decoding it: a watcher that waits for runs to end sees every save of every run (five
    or so per agent run) and need decode only the ones this lets through.

    A finished snapshot's status is a JSON string holding ``completed``, ``failed`` or
    ``cancelled``, and in UTF-8 JSON without escapes that string is those bytes, quotes
    included; when none of them is in ``data`` the status is another. Text that may be spelled
    otherwise (a ``\\u`` escape anywhere, or bytes ``json`` would not read as UTF-8, which
    ``loads_json`` tests the same way) is let through. True means only: decode to know (the
    same strings elsewhere, a step's status or an output, let a snapshot through too)."""
    # Four searches of the bytes, each a fast scan in C (one regular expression of the four
    # alternatives took three times as long).
    return (
        data[:1] != b"{"
        or data[1:2] in (b"", b"\x00")
        or _COMPLETED_TEXT in data
        or _FAILED_TEXT in data
        or _CANCELLED_TEXT in data
        or b"\\u" in data
    )


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
