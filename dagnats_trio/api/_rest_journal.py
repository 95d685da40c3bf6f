"""The REST journal reader: pages of records, and a live server-sent event stream.

Reads go through :meth:`Transport.read_subject` (direct gets by sequence, answered by the stream
leader) from a cursor, never through a JetStream consumer: a consumer per read leaks, and a
follower may stay connected for hours. Live delivery wakes on a core subscription to the
journal subject (every JetStream publish is also a core message) and otherwise polls on a short
bounded interval, so a lost wake-up costs at most one interval. The record decoder is the one
every journal reader shares (:func:`dagnats_trio.protocol.decode_record`).
"""

from __future__ import annotations

import logging

import attrs
import trio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..protocol import (
    RECORD_TYPE_HEADER,
    DecodeError,
    JournalRecord,
    converter,
    decode_record,
    parse_decimal,
    to_json,
)
from ..transport import StoredMsg, Transport, TransportError, layout
from ._rest_errors import bad_request
from ._rest_views import JournalEntry, JournalPage
from .service import RunNotFound, Service

log = logging.getLogger(__name__)

#: Records per page when the client names no limit, and the most it may ask for.
JOURNAL_PAGE_LIMIT_DEFAULT = 100
JOURNAL_PAGE_LIMIT_MAX = 1_000
#: Records read per round of a live stream.
FOLLOW_BATCH_RECORDS = 100
#: Longest a live stream goes without looking for new records or a finished step.
FOLLOW_POLL_INTERVAL_S = 0.5
#: A comment line is sent after this much silence, so proxies and clients see a live stream.
FOLLOW_KEEPALIVE_S = 15.0
#: A live stream is closed after this long; the client reconnects with ``Last-Event-ID``.
FOLLOW_MAX_S = 3_600.0

#: Largest record sequence accepted from a client (``from``, ``Last-Event-ID``).
MAX_SEQ = 2**63 - 1

SSE_MEDIA_TYPE = "text/event-stream"
#: The event that closes a stream because the step finished.
END_EVENT = "end"


def entry_of(msg: StoredMsg) -> JournalEntry:
    """A stored record as the API shows it; an undecodable body is reported, not fatal."""
    try:
        record = decode_record(msg.data)
    except DecodeError as exc:
        kind = msg.headers.get(RECORD_TYPE_HEADER, "unknown")
        return JournalEntry(seq=msg.seq, type=kind, record=None, error=str(exc))
    body = converter.unstructure(record, unstructure_as=JournalRecord)
    return JournalEntry(seq=msg.seq, type=record.TYPE, record=body)


async def read_page(
    transport: Transport, run_id: str, step_id: str, from_seq: int, limit: int
) -> JournalPage:
    msgs = await transport.read_subject(
        layout.JOURNAL_STREAM, layout.journal_subject(run_id, step_id), max(from_seq, 1), limit
    )
    entries = tuple(entry_of(m) for m in msgs)
    following = entries[-1].seq + 1 if entries else max(from_seq, 1)
    return JournalPage(records=entries, next=following)


def sse_event(entry: JournalEntry) -> bytes:
    """One event: ``id`` the sequence, ``event`` the record type, ``data`` the entry as JSON
    (compact JSON has no raw newlines, so one ``data`` line always holds it)."""
    return f"id: {entry.seq}\nevent: {entry.type}\ndata: ".encode() + to_json(entry) + b"\n\n"


@attrs.frozen
class FollowEnd:
    """Data of the ``end`` event: why the stream closed."""

    step_status: str
    run_status: str


class JournalFollowResponse(Response):
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
            status_code=200,
            media_type=SSE_MEDIA_TYPE,
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )
        # The base class counted an empty body; a stream has no length.
        del self.headers["content-length"]
        self._service = service
        self._transport = transport
        self._run_id = run_id
        self._step_id = step_id
        self._cursor = max(start_seq, 1)
        self._poll_interval_s = poll_interval_s
        self._keepalive_s = keepalive_s
        self._max_follow_s = max_follow_s
        self._wake = trio.Event()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._watch_disconnect, receive, nursery.cancel_scope)
            await nursery.start(self._wake_on_publish)
            with trio.move_on_after(self._max_follow_s):
                try:
                    await self._stream(send)
                except (OSError, TransportError) as exc:
                    # The client went away mid-write, or NATS failed: the stream just ends and
                    # the client resumes from its last event id.
                    log.warning("journal stream %s/%s ended: %r", self._run_id, self._step_id, exc)
            nursery.cancel_scope.cancel()
        # A client that disconnected cannot be written to; hypercorn ignores the late send.
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _watch_disconnect(self, receive: Receive, scope: trio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return

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

    async def _stream(self, send: Send) -> None:
        quiet_since = trio.current_time()
        finished: FollowEnd | None = None
        while True:
            # A fresh event before each read: a publish during the read wakes the next wait.
            self._wake = trio.Event()
            page = await read_page(
                self._transport, self._run_id, self._step_id, self._cursor, FOLLOW_BATCH_RECORDS
            )
            for entry in page.records:
                await send(
                    {"type": "http.response.body", "body": sse_event(entry), "more_body": True}
                )
            self._cursor = page.next
            if page.records:
                quiet_since = trio.current_time()
            if len(page.records) == FOLLOW_BATCH_RECORDS:
                continue
            if finished is not None:
                # The step was seen finished before this read, so this read got every record.
                data = to_json(finished)
                await send(
                    {
                        "type": "http.response.body",
                        "body": f"event: {END_EVENT}\ndata: ".encode() + data + b"\n\n",
                        "more_body": True,
                    }
                )
                return
            finished = await self._finished()
            if finished is not None:
                continue
            with trio.move_on_after(self._poll_interval_s):
                await self._wake.wait()
            if trio.current_time() - quiet_since >= self._keepalive_s:
                await send(
                    {"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True}
                )
                quiet_since = trio.current_time()

    async def _finished(self) -> FollowEnd | None:
        try:
            snap = await self._service.get_run(self._run_id)
        except RunNotFound:
            return FollowEnd(step_status="unknown", run_status="unknown")
        step = snap.steps.get(self._step_id)
        step_status = step.status.value if step is not None else "unknown"
        if step is None or step.status.finished or snap.status.finished:
            return FollowEnd(step_status=step_status, run_status=snap.status.value)
        return None


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
