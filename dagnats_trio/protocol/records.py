"""Journal records on ``journal.{run}.{step}``; see docs/journal-wire-format.md.

Every record names the iteration and attempt it belongs to and the claim (``claim_id``) of the
writer, so the audit can tell which holder wrote what after which claim. Calls (model and tool)
share one position counter per iteration: ``call``.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable
from typing import ClassVar, Final, final

import attrs

from ._codec import (
    TAG_FIELD,
    DecodeError,
    JsonValue,
    converter,
    dumps_json,
    encoder_of,
    from_json,
    register_union,
)
from .common import Wait

#: Header carrying the record kind, so a reader can filter without decoding the body.
RECORD_TYPE_HEADER = "Dagnats-Record"
#: Header on each record stored in an atomic batch: ``k/n``, its place in a batch of ``n``
#: records (stored whole or not at all, at consecutive sequences). Absent on a record stored
#: alone, as on every record written before batches existed.
BATCH_HEADER = "Dagnats-Batch"
#: ``type`` of a message body that holds several records of one writer (:class:`RecordGroup`).
GROUP_TYPE = "group"
#: Joins the record types of a :class:`RecordGroup` in its ``Dagnats-Record`` header.
GROUP_TYPE_SEPARATOR = "+"


class Replay(enum.Enum):
    """A declaration about a tool: may it run twice?"""

    SAFE = "safe"
    UNSAFE = "unsafe"


class CommitAction(enum.Enum):
    CONTINUE = "continue"
    COMPLETE = "complete"
    FAIL = "fail"
    PAUSE = "pause"


@final
@attrs.frozen
class ClaimRecord:
    TYPE: ClassVar[str] = "claim"
    iteration: int
    attempt: int
    claim_id: str
    nonce: str


@final
@attrs.frozen
class ModelRecord:
    TYPE: ClassVar[str] = "model"
    iteration: int
    attempt: int
    claim_id: str
    call: int
    response: JsonValue


@final
@attrs.frozen
class ToolIntentRecord:
    TYPE: ClassVar[str] = "tool.intent"
    iteration: int
    attempt: int
    claim_id: str
    call: int
    name: str
    input: JsonValue
    replay: Replay
    key: str
    #: A member of a parallel group (``Journal.tools``): the group's first position and size.
    group: int | None = None
    group_size: int | None = None
    #: The model's id of this call, when it gave one (matched on replay).
    call_id: str | None = None


@final
@attrs.frozen
class ToolOutputRecord:
    """Partial output written while a tool runs; lands in an interrupted result on recovery."""

    TYPE: ClassVar[str] = "tool.output"
    iteration: int
    attempt: int
    claim_id: str
    call: int
    chunk: JsonValue


@final
@attrs.frozen
class ToolResultRecord:
    TYPE: ClassVar[str] = "tool.result"
    iteration: int
    attempt: int
    claim_id: str
    call: int
    output: JsonValue = None
    error: str | None = None
    interrupted: bool = False
    partial: list[JsonValue] = attrs.field(factory=list)
    #: A group member cancelled because the member at this position failed.
    cancelled_by: int | None = None


@final
@attrs.frozen
class InputPlacedRecord:
    TYPE: ClassVar[str] = "input.placed"
    iteration: int
    attempt: int
    claim_id: str
    request_id: str
    mode: str
    content: JsonValue


@final
@attrs.frozen
class CommitRecord:
    """Ends an iteration: the next action and the state of record."""

    TYPE: ClassVar[str] = "commit"
    iteration: int
    attempt: int
    claim_id: str
    nonce: str
    action: CommitAction
    state: JsonValue = None
    output: JsonValue = None
    wait: Wait | None = None
    error: str | None = None
    retriable: bool = True
    reason: str | None = None
    pause_ms: int | None = None


JournalRecord = (
    ClaimRecord
    | ModelRecord
    | ToolIntentRecord
    | ToolOutputRecord
    | ToolResultRecord
    | InputPlacedRecord
    | CommitRecord
)

register_union(JournalRecord)


@final
@attrs.frozen
class RecordGroup:
    """Records of one writer stored as ONE message, in order: stored whole or not at all because
    they are one message, fenced once. Its body names its ``type`` (``group``), so it is never
    mistaken for a record nor for a bare JSON array (an undecodable body); the records inside
    are the same records, fields and order as when each is stored alone."""

    TYPE: ClassVar[str] = GROUP_TYPE
    records: list[JournalRecord]


#: What one stored journal message holds: a record, or a group of them (tagged by ``type``).
StoredRecords = JournalRecord | RecordGroup

register_union(StoredRecords)


#: A record's unstructured form (its union's hook, the tag written last), looked up once.
_RECORD_RAW: Final = converter.get_unstructure_hook(JournalRecord)

#: ``to_json(record, JournalRecord)``, the hook looked up once (:func:`encoder_of`).
encode_record: Final[Callable[[JournalRecord], bytes]] = encoder_of(JournalRecord)


def decode_record(data: bytes) -> JournalRecord:
    """One record's body; raises :class:`DecodeError` (a reader of stored messages uses
    :func:`decode_records`, which also reads a :class:`RecordGroup`)."""
    return from_json(data, JournalRecord, "journal record")


def encode_group(records: list[JournalRecord]) -> bytes:
    """The body of one message holding ``records`` in order (see :class:`RecordGroup`): the
    bytes of ``to_json(RecordGroup(records), StoredRecords)``, its unstructured form built here
    (the records, then the tag, as cattrs' hooks order them) with each record's hook called
    directly, not through the group's and the list's hooks."""
    return dumps_json({"records": list(map(_RECORD_RAW, records)), TAG_FIELD: GROUP_TYPE}).encode()


def decode_records(data: bytes) -> tuple[JournalRecord, ...]:
    """The records one stored journal message holds, in order: the one expansion every journal
    reader shares. A record stored alone is one; a :class:`RecordGroup` is its records (never
    empty). Raises :class:`DecodeError` for anything else: the message is unreadable whole."""
    got: JournalRecord | RecordGroup = from_json(data, StoredRecords, "journal record")
    if not isinstance(got, RecordGroup):
        return (got,)
    if not got.records:
        raise DecodeError("not a valid journal record group: it holds no records")
    return tuple(got.records)


def record_headers(record: JournalRecord) -> dict[str, str]:
    return {RECORD_TYPE_HEADER: record.TYPE}


#: A record's ``TYPE``, read in C (a generator or comprehension is a Python frame per group).
_TYPE_OF: Final = operator.attrgetter("TYPE")


def group_headers(records: list[JournalRecord]) -> dict[str, str]:
    """``Dagnats-Record`` of a :class:`RecordGroup` message: its records' types in order, joined
    by ``+`` (``model+tool.intent``), so a reader can still filter without decoding."""
    return {RECORD_TYPE_HEADER: GROUP_TYPE_SEPARATOR.join(map(_TYPE_OF, records))}
