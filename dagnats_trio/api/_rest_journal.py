"""The REST journal reader: pages of records, and a live server-sent event stream.

Reads go through :meth:`Transport.get_batch` (a batch direct get: one request streams a page,
answered by any replica; a lagging one answers a shorter page, never one with a gap, as a
replica stores a prefix of the stream) from a cursor, never through a JetStream consumer: a
consumer per read leaks, and a follower may stay connected for hours. Live delivery wakes on a
core subscription to the journal subject (every JetStream publish is also a core message) and
otherwise polls on a short bounded interval, so a lost wake-up costs at most one interval. The
record decoder is the one every journal reader shares (:func:`dagnats_trio.protocol.decode_record`).
"""

from __future__ import annotations

import logging
from typing import final

import trio

from ..protocol import (
    BATCH_HEADER,
    RECORD_TYPE_HEADER,
    DecodeError,
    JournalRecord,
    converter,
    decode_record,
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
#: Records read per round of a live stream.
FOLLOW_BATCH_RECORDS = 100
#: Longest a live stream goes without looking for new records or a finished step.
FOLLOW_POLL_INTERVAL_S = 0.5

#: Largest record sequence accepted from a client (``from``, ``Last-Event-ID``).
MAX_SEQ = 2**63 - 1


def entry_of(msg: StoredMsg) -> JournalEntry:
    """A stored record as the API shows it; an undecodable body is reported, not fatal."""
    batch = msg.headers.get(BATCH_HEADER)
    try:
        record = decode_record(msg.data)
    except DecodeError as exc:
        kind = msg.headers.get(RECORD_TYPE_HEADER, "unknown")
        return JournalEntry(seq=msg.seq, type=kind, record=None, error=str(exc), batch=batch)
    body = converter.unstructure(record, unstructure_as=JournalRecord)
    return JournalEntry(seq=msg.seq, type=record.TYPE, record=body, batch=batch)


async def read_page(
    transport: Transport, run_id: str, step_id: str, from_seq: int, limit: int
) -> JournalPage:
    msgs = await transport.get_batch(
        layout.JOURNAL_STREAM,
        max(from_seq, 1),
        limit,
        subject=layout.journal_subject(run_id, step_id),
    )
    entries = tuple(entry_of(m) for m in msgs)
    following = entries[-1].seq + 1 if entries else max(from_seq, 1)
    return JournalPage(records=entries, next=following)


@final
class JournalFollowResponse(StepStreamResponse):
    """A server-sent event stream of one step's journal, from ``start_seq`` on, until the step
    (or its run) is finished and every record written before that was sent."""

    def __init__(
        self,
        service: Service,
        transport: Transport,
        run_id: str,
        step_id: str,
        start_seq: int,
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
        self._cursor = max(start_seq, 1)
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
            page = await read_page(
                self._transport, self._run_id, self._step_id, self._cursor, FOLLOW_BATCH_RECORDS
            )
            for entry in page.records:
                await sink.event(entry.type, to_json(entry), event_id=entry.seq)
            self._cursor = page.next
            if len(page.records) == FOLLOW_BATCH_RECORDS:
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


def parse_last_event_id(value: str | None) -> int | None:
    """The sequence after which to resume, from a ``Last-Event-ID`` header (None when absent)."""
    if value is None or not value.strip():
        return None
    try:
        return parse_decimal(value.strip(), low=0, high=MAX_SEQ)
    except ValueError:
        raise bad_request(
            f"Last-Event-ID {value!r} is not a record sequence", code="invalid_last_event_id"
        ) from None
