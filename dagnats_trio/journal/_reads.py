"""Reading a step's journal: the tail, pages of records, the commit a task starts from.

Reads only (never a consumer: direct gets by subject and sequence, a page of records per
request), so every one is retried on a transient failure. The handle, the claim protocol and
the audit all read through here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from dagnats_trio.protocol import (
    BATCH_HEADER,
    CommitRecord,
    DecodeError,
    JournalRecord,
    JsonValue,
    decode_records,
)
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import NotFound, StoredMsg, Transport, retry_transient

from ._errors import JournalCorrupt
from ._replay import Entry, TaskIdentity
from .check import Unreadable

_log = logging.getLogger(__name__)

#: Records asked for per ``read_subject`` call when reading an iteration.
READ_PAGE_RECORDS: Final = 256

T = TypeVar("T")


async def retry_read(what: str, fn: Callable[[], Awaitable[T]]) -> T:
    """Retry ``fn`` on no-leader / timeout with the transient backoff (reads only: idempotent)."""
    return await retry_transient(fn, lambda exc: _log.debug("%s: %s", what, exc))


async def read_tail(transport: Transport, subject: str) -> StoredMsg | None:
    """The last record of ``subject`` (None when it has none)."""
    tail: StoredMsg | None = await retry_read(
        "tail", lambda: transport.get_last_msg(JOURNAL_STREAM, subject)
    )
    return tail


def decode_entries(msg: StoredMsg) -> list[Entry]:
    """``(seq, record)`` of each record a stored message holds, in order (the records of one
    message share its sequence); :class:`JournalCorrupt` when it does not decode."""
    try:
        return [(msg.seq, rec) for rec in decode_records(msg.data)]
    except DecodeError as exc:
        raise JournalCorrupt(msg.seq, str(exc)) from None


def decode_entry(msg: StoredMsg) -> Entry:
    """``(seq, record)`` of the last record a stored message holds (the tail's last record:
    the one written last); :class:`JournalCorrupt` when it does not decode."""
    return decode_entries(msg)[-1]


async def read_entries(
    transport: Transport, subject: str, from_seq: int, to_seq: int | None = None
) -> list[Entry]:
    """Records of ``subject`` from ``from_seq`` up to ``to_seq`` (the tail when None)."""
    if to_seq is None:
        tail = await read_tail(transport, subject)
        if tail is None:
            return []
        to_seq = tail.seq
    msgs = await _read_msgs(transport, subject, from_seq, to_seq)
    return [entry for msg in msgs for entry in decode_entries(msg)]


async def _read_msgs(
    transport: Transport, subject: str, from_seq: int, to_seq: int
) -> list[StoredMsg]:
    """The records of ``subject`` from ``from_seq`` to ``to_seq`` (a sequence the leader showed
    holding a record of the subject), a page of :data:`READ_PAGE_RECORDS` per request (a batch
    direct get streams the page). A batch get may be answered by a replica that lags the leader;
    a replica stores a prefix of the stream, so a short read is finished from the leader, one
    direct get per record, never read with a gap."""
    out: list[StoredMsg] = []
    seq = max(from_seq, 1)
    while seq <= to_seq:
        page: list[StoredMsg] = await retry_read(
            "read",
            functools.partial(
                transport.get_batch, JOURNAL_STREAM, seq, READ_PAGE_RECORDS, subject=subject
            ),
        )
        for msg in page:
            if msg.seq > to_seq:
                return out
            out.append(msg)
        if len(page) < READ_PAGE_RECORDS:
            break
        seq = page[-1].seq + 1
    if not out or out[-1].seq != to_seq:
        seq = out[-1].seq + 1 if out else max(from_seq, 1)
        out.extend(await _read_from_leader(transport, subject, seq, to_seq))
    return out


async def _read_from_leader(
    transport: Transport, subject: str, from_seq: int, to_seq: int
) -> list[StoredMsg]:
    out: list[StoredMsg] = []
    seq = from_seq
    while seq <= to_seq:
        page: list[StoredMsg] = await retry_read(
            "read",
            functools.partial(
                transport.read_subject, JOURNAL_STREAM, subject, seq, READ_PAGE_RECORDS
            ),
        )
        out.extend(m for m in page if m.seq <= to_seq)
        if len(page) < READ_PAGE_RECORDS or page[-1].seq >= to_seq:
            break
        seq = page[-1].seq + 1
    return out


async def read_journal_for_audit(
    transport: Transport, run_id: str, step_id: str
) -> tuple[list[Entry], list[Unreadable], dict[int, str]]:
    """Every record of one step's journal that decodes, every message that does not, and the
    batch mark of each stored in an atomic batch (by sequence): for the audit, where a bad record
    is a finding to report with its sequence, not the end of the read (:func:`read_journal`
    raises :class:`JournalCorrupt` at the first). The records of one message share its
    sequence, which is how the audit sees a group stored as one message whole."""
    subject = journal_subject(run_id, step_id)
    tail = await read_tail(transport, subject)
    if tail is None:
        return [], [], {}
    records: list[Entry] = []
    unreadable: list[Unreadable] = []
    batches: dict[int, str] = {}
    for msg in await _read_msgs(transport, subject, 1, tail.seq):
        mark = msg.headers.get(BATCH_HEADER)
        if mark is not None:
            batches[msg.seq] = mark
        try:
            records.extend((msg.seq, rec) for rec in decode_records(msg.data))
        except DecodeError as exc:
            unreadable.append(Unreadable(msg.seq, str(exc)))
    return records, unreadable, batches


async def read_journal(
    transport: Transport, run_id: str, step_id: str
) -> list[tuple[int, JournalRecord]]:
    """Every record of one step's journal, in order: the one reader every tool shares (never a
    consumer: a page of records per request)."""
    return await read_entries(transport, journal_subject(run_id, step_id), 1)


async def load_commit_state(transport: Transport, task: TaskIdentity) -> JsonValue:
    """The state carried by the commit at the task's ``journal_seq`` (None when it has none)."""
    if task.journal_seq is None:
        return None
    try:
        msg: StoredMsg = await retry_read(
            "state", lambda: transport.get_msg(JOURNAL_STREAM, task.journal_seq or 0)
        )
    except NotFound:
        raise JournalCorrupt(
            task.journal_seq, "the commit this task names is missing (purged or expired?)"
        ) from None
    # The commit is stored alone or as the last record of a group (a result with its commit).
    seq, rec = decode_entry(msg)
    if not isinstance(rec, CommitRecord):
        raise JournalCorrupt(seq, f"expected a commit record, found {rec.TYPE!r}")
    return rec.state
