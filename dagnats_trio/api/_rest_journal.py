"""The REST journal reader: pages of records, and a live server-sent event stream.

Reads go through :meth:`Transport.get_batch` (a batch direct get: one request streams a page,
answered by any replica; a lagging one answers a shorter page, never one with a gap, as a
replica stores a prefix of the stream) from a cursor, never through a JetStream consumer: a
consumer per read leaks, and a follower may stay connected for hours. Live delivery wakes on a
core subscription to the journal subject (every JetStream publish is also a core message) and
otherwise polls on a short bounded interval, so a lost wake-up costs at most one interval. The
record expansion is the one every journal reader shares
(:func:`dagnats_trio.protocol.decode_records`): a message may hold several records (a group
stored as one message), which share its sequence.

A live stream's event ids resume exactly: the last record of a message (or a record stored
alone) has the message's sequence as its id, an earlier record ``k`` of a message its place,
``{seq}.{k}``. A client that reconnects with either resumes right after that record: never a
gap (the second record of a message is not skipped), never a repeat.
"""

from __future__ import annotations

import logging
from typing import final

import attrs
import trio

from ..protocol import (
    BATCH_HEADER,
    RECORD_TYPE_HEADER,
    DecodeError,
    JournalRecord,
    converter,
    decode_records,
    layout,
    parse_decimal,
    to_json,
)
from ..transport import StoredMsg, Transport, TransportError
from ..web import bad_request
from ._rest_sse import (
    END_EVENT,
    FOLLOW_KEEPALIVE_S,
    FOLLOW_MAX_S,
    EventSink,
    FollowEnd,
    StepStreamResponse,
)
from ._rest_views import JournalEntry, JournalPage
from .service import Service

log = logging.getLogger(__name__)

#: Records per page when the client names no limit, and the most it may ask for.
JOURNAL_PAGE_LIMIT_DEFAULT = 100
JOURNAL_PAGE_LIMIT_MAX = 1_000
#: Stored messages read per round of a live stream (a message may hold several records).
FOLLOW_BATCH_RECORDS = 100
#: Longest a live stream goes without looking for new records or a finished step.
FOLLOW_POLL_INTERVAL_S = 0.5

#: Largest record sequence accepted from a client (``from``, ``Last-Event-ID``).
MAX_SEQ = 2**63 - 1


@final
@attrs.frozen
class JournalCursor:
    """Where a live stream resumes: the message at ``seq``, less its first ``skip`` records
    (already sent)."""

    seq: int
    skip: int = 0


def entries_of(msg: StoredMsg) -> tuple[JournalEntry, ...]:
    """The records of a stored message as the API shows them, each with the message's sequence
    (records sharing a sequence were stored as one message, whole); an undecodable body is
    reported, not fatal."""
    batch = msg.headers.get(BATCH_HEADER)
    try:
        records = decode_records(msg.data)
    except DecodeError as exc:
        kind = msg.headers.get(RECORD_TYPE_HEADER, "unknown")
        return (JournalEntry(seq=msg.seq, type=kind, record=None, error=str(exc), batch=batch),)
    return tuple(
        JournalEntry(
            seq=msg.seq,
            type=record.TYPE,
            record=converter.unstructure(record, unstructure_as=JournalRecord),
            batch=batch,
        )
        for record in records
    )


def event_id_of(seq: int, k: int, n: int) -> str:
    """The SSE id of record ``k`` (from 1) of the ``n`` a message at ``seq`` holds."""
    return str(seq) if k == n else f"{seq}.{k}"


async def _read_msgs(
    transport: Transport, run_id: str, step_id: str, from_seq: int, limit: int
) -> list[StoredMsg]:
    msgs: list[StoredMsg] = await transport.get_batch(
        layout.JOURNAL_STREAM,
        max(from_seq, 1),
        limit,
        subject=layout.journal_subject(run_id, step_id),
    )
    return msgs


async def read_page(
    transport: Transport, run_id: str, step_id: str, from_seq: int, limit: int
) -> JournalPage:
    """Up to ``limit`` stored messages from ``from_seq`` on, as records (a message holding a
    group gives each of its records, so a page may hold more records than ``limit``)."""
    msgs = await _read_msgs(transport, run_id, step_id, from_seq, limit)
    entries = tuple(entry for m in msgs for entry in entries_of(m))
    following = msgs[-1].seq + 1 if msgs else max(from_seq, 1)
    return JournalPage(records=entries, next=following)


@final
class JournalFollowResponse(StepStreamResponse):
    """A server-sent event stream of one step's journal, from ``start`` on, until the step
    (or its run) is finished and every record written before that was sent."""

    def __init__(
        self,
        service: Service,
        transport: Transport,
        run_id: str,
        step_id: str,
        start: JournalCursor,
        *,
        poll_interval_s: float = FOLLOW_POLL_INTERVAL_S,
        keepalive_s: float = FOLLOW_KEEPALIVE_S,
        max_follow_s: float = FOLLOW_MAX_S,
    ) -> None:
        super().__init__(
            service,
            transport,
            run_id,
            step_id,
            kind="journal",
            poll_interval_s=poll_interval_s,
            keepalive_s=keepalive_s,
            max_follow_s=max_follow_s,
        )
        self._cursor = JournalCursor(max(start.seq, 1), start.skip)
        self._wake = trio.Event()

    async def stream(self, sink: EventSink) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(self._wake_on_publish)
            await sink.start()
            await self._follow(sink)
            nursery.cancel_scope.cancel()

    async def _wake_on_publish(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        subject = layout.journal_subject(self._run_id, self._step_id)
        try:
            async with self._transport.subscribe(subject) as messages:
                task_status.started()
                async for _ in messages:
                    self._wake.set()
        except TransportError as exc:
            # Without the subscription the stream still works, on polling alone.
            log.warning("journal stream without live wake-ups for %s: %r", subject, exc)
            task_status.started()

    async def _follow(self, sink: EventSink) -> None:
        finished: FollowEnd | None = None
        while True:
            # A fresh event before each read: a publish during the read wakes the next wait.
            self._wake = trio.Event()
            msgs = await _read_msgs(
                self._transport,
                self._run_id,
                self._step_id,
                self._cursor.seq,
                FOLLOW_BATCH_RECORDS,
            )
            for msg in msgs:
                entries = entries_of(msg)
                skip = self._cursor.skip if msg.seq == self._cursor.seq else 0
                for k, entry in enumerate(entries, 1):
                    if k <= skip:
                        continue
                    event_id = event_id_of(msg.seq, k, len(entries))
                    await sink.event(entry.type, to_json(entry), event_id=event_id)
                    self._cursor = (
                        JournalCursor(msg.seq + 1)
                        if k == len(entries)
                        else JournalCursor(msg.seq, k)
                    )
            if len(msgs) == FOLLOW_BATCH_RECORDS:
                continue
            if finished is not None:
                # The step was seen finished before this read, so this read got every record.
                await sink.event(END_EVENT, to_json(finished))
                return
            finished = await self.finished()
            if finished is not None:
                continue
            with trio.move_on_after(self._poll_interval_s):
                await self._wake.wait()
            await sink.keepalive_if_quiet()


#: Most records one stored message may hold, as far as a ``Last-Event-ID`` place goes.
MAX_RECORDS_PER_MSG = 2**31 - 1


def parse_last_event_id(value: str | None) -> JournalCursor | None:
    """Where to resume after the record a ``Last-Event-ID`` header names (None when absent):
    ``{seq}`` (a message sent whole) resumes at the next message, ``{seq}.{k}`` (record ``k``
    of the message at ``seq``) at its record ``k + 1``."""
    if value is None or not value.strip():
        return None
    seq_text, dot, k_text = value.strip().partition(".")
    try:
        seq = parse_decimal(seq_text, low=0, high=MAX_SEQ)
        if not dot:
            return JournalCursor(seq + 1)
        return JournalCursor(seq, parse_decimal(k_text, low=1, high=MAX_RECORDS_PER_MSG))
    except ValueError:
        raise bad_request(
            f"Last-Event-ID {value!r} is not a record id ('<seq>' or '<seq>.<k>')",
            code="invalid_last_event_id",
        ) from None
