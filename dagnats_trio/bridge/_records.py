"""The journal as a bridge client sees it: the records it may append (decoded and checked
before anything is claimed) and the records of its iteration it reads back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import attrs

from ..journal import check
from ..protocol import (
    DecodeError,
    JournalRecord,
    JsonPolicyError,
    JsonValue,
    ModelRecord,
    TaskMessage,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
    converter,
    decode_records,
    encode_json,
    from_obj,
)
from ..protocol.layout import JOURNAL_STREAM, journal_subject
from ..transport import Transport
from ..web import listed_names
from ._errors import BridgeError, bad_request
from ._views import BridgeJournalEntry

#: Most records ``journal/read`` returns at once.
JOURNAL_READ_MAX_RECORDS: Final = 4096
#: Records asked for per read of the journal subject.
JOURNAL_READ_PAGE_RECORDS: Final = 256

#: The records a client appends itself; claims and commits are the bridge's. Read-only: it is
#: exported, and a caller adding a kind would change what every bridge in the process accepts.
APPENDABLE: Final[Mapping[str, Any]] = MappingProxyType(
    {cls.TYPE: cls for cls in (ModelRecord, ToolIntentRecord, ToolOutputRecord, ToolResultRecord)}
)
#: Filled by the bridge; a body naming them is refused so nobody thinks they are honoured.
FILLED_FIELDS: Final = ("iteration", "attempt", "claim_id")


def compact_json(value: JsonValue, what: str) -> bytes:
    """``value`` encoded under the JSON policy; a 400 naming ``what`` if it breaks it."""
    try:
        return encode_json(value, where=what)
    except JsonPolicyError as exc:
        raise bad_request(str(exc), "invalid_json") from None


def decode_append(raw: dict[str, JsonValue]) -> JournalRecord:
    """The client's record, with placeholders where the bridge fills in its claim."""
    kind = raw.get("type")
    if kind in ("claim", "commit", "input.placed"):
        how = {
            "claim": "journal/read or journal/append claims",
            "commit": "complete, fail, continue and pause commit",
            "input.placed": "inputs/place claims each input and records it",
        }[str(kind)]
        raise bad_request(f"a client does not append {kind!r} records: {how}", "invalid_record")
    cls = APPENDABLE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        allowed = ", ".join(sorted(APPENDABLE))
        raise bad_request(f"type must be one of {allowed}, got {kind!r}", "invalid_record")
    named = [k for k in FILLED_FIELDS if k in raw]
    if named:
        raise bad_request(
            f"{', '.join(named)} must not be sent: the bridge fills them from the lease",
            "invalid_record",
        )
    fields = {f.name for f in attrs.fields(cls)}
    unknown = sorted(k for k in raw if k != "type" and k not in fields)
    if unknown:
        allowed = ", ".join(sorted(fields - set(FILLED_FIELDS)))
        raise bad_request(
            # Capped as the REST 400s are: a body of thousands of keys drew a message quoting
            # every one (found from outside).
            f"unknown field(s) {listed_names(unknown)} for {kind!r}; allowed: {allowed}",
            "invalid_record",
        )
    if cls is ToolIntentRecord and "key" not in raw:
        raw = {**raw, "key": ""}
    placeholder = {**raw, "iteration": 0, "attempt": 0, "claim_id": ""}
    try:
        record: JournalRecord = from_obj(placeholder, JournalRecord, f"{kind} record")
    except DecodeError as exc:
        raise bad_request(str(exc), "invalid_record") from None
    call = getattr(record, "call", 0)
    if call < 0:
        raise bad_request(f"call must be >= 0, got {call}", "invalid_record")
    if isinstance(record, ToolIntentRecord) and not record.name:
        # As the SDK's j.tool refuses a ToolCall with no name: replay matches calls by name.
        raise bad_request("name must be a non-empty string", "invalid_record")
    return record


#: The rules of the journal audit (``dagnats_trio.journal.check``, rule 3) on calls and their
#: positions. An appended record that would break one is refused with 400 before anything is
#: written: stored, it would make ``journal check`` fail on the run for good.
POSITION_RULES: Final = frozenset(
    {
        "position-reused",
        "duplicate-intent",
        "duplicate-result",
        "result-without-intent",
        "output-without-intent",
        "group-shape",
        "group-intent-after-start",
    }
)


def refuse_misplaced(known: Sequence[tuple[int, JournalRecord]], record: JournalRecord) -> None:
    """A 400 ``invalid_record`` naming the rule when ``record``, appended after ``known`` (the
    records of its iteration so far), breaks one of :data:`POSITION_RULES`: a result or
    partial output without an intent at its call, a second intent, result or model record at
    one position, a model record over a tool's."""
    seq = (known[-1][0] if known else 0) + 1
    report = check([*known, (seq, record)])
    for v in report.violations:
        if v.seq == seq and v.rule in POSITION_RULES:
            raise bad_request(f"{v.rule}: {v.message}", "invalid_record")


async def read_iteration(
    transport: Transport,
    t: TaskMessage,
    to_seq: int | None = None,
    *,
    skip_unreadable: bool = False,
) -> list[tuple[int, JournalRecord]]:
    """The records of the task's iteration (each with its message's sequence), from the commit
    the task names up to ``to_seq`` (None: the end of the subject). A message that does not
    decode is a 500 ``journal_corrupt``, or with ``skip_unreadable`` left out (the claim and the
    fenced append answer for it, as they do for the SDK)."""
    subject = journal_subject(t.run_id, t.step_id)
    out: list[tuple[int, JournalRecord]] = []
    seq = max(t.journal_seq or 1, 1)
    while to_seq is None or seq <= to_seq:
        page = await transport.read_subject(JOURNAL_STREAM, subject, seq, JOURNAL_READ_PAGE_RECORDS)
        for msg in page:
            if to_seq is not None and msg.seq > to_seq:
                return out
            try:
                recs = decode_records(msg.data)
            except DecodeError as exc:
                if skip_unreadable:
                    continue
                raise BridgeError(
                    500, "journal_corrupt", f"journal record {msg.seq} is unreadable: {exc}"
                ) from None
            out.extend((msg.seq, rec) for rec in recs if rec.iteration == t.dispatch.iteration)
        if len(page) < JOURNAL_READ_PAGE_RECORDS:
            break
        seq = page[-1].seq + 1
    return out


async def iteration_records(
    transport: Transport, t: TaskMessage, to_seq: int
) -> tuple[list[BridgeJournalEntry], bool]:
    """The records of the task's iteration up to ``to_seq`` (its claim), and whether the list
    was cut at :data:`JOURNAL_READ_MAX_RECORDS`."""
    records = await read_iteration(transport, t, to_seq)
    out = [
        BridgeJournalEntry(seq, converter.unstructure(rec, JournalRecord))
        for seq, rec in records[:JOURNAL_READ_MAX_RECORDS]
    ]
    return out, len(records) > JOURNAL_READ_MAX_RECORDS
