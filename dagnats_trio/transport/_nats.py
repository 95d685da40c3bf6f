"""`NatsTransport`: the :class:`Transport` protocol over nats-py, driven from Trio.

nats-py is asyncio code; trio-asyncio runs its event loop inside the Trio run. Every call crosses
into asyncio exactly once (an asyncio task for a nats-py coroutine, :func:`_run_shielded`), so
the hop cost is paid once per round trip, and a cancelled Trio caller never cancels nats-py
midway. JetStream API requests are sent as plain requests on their API
subjects and their JSON answers read here: that is one hop and gives the server's ``err_code``
for the typed errors. Nothing asyncio-flavoured leaves this module: messages are copied into the
interface's values, deliveries wrap only the reply subject, errors are mapped.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from typing import Any, TypeVar, final

import nats
import nats.errors
import nats.js.errors
import outcome
import trio
import trio_asyncio
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api as js_api
from nats.js.client import JetStreamContext

from dagnats_trio._env import DEFAULT_ENV, backoff_delay_s

from ._interface import (
    DEFAULT_REQUEST_TIMEOUT_S,
    Closed,
    ConsumerConfig,
    CoreMsg,
    Delivery,
    Headers,
    KvEntry,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
)
from ._jetstream import (
    JetStreamOverRequests,
    NoResponders,
    api_error,
    check_name,
    is_delete_marker,
    json_error,
    kv_prefix,
    kv_stream,
    ns,
    watch_filter,
)

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Reconnect attempts before nats-py gives the connection up: never (-1). A process rides out
#: an outage of any length; calls fail (TemporarilyUnavailable, TransportTimeout) meanwhile.
MAX_RECONNECT_ATTEMPTS = -1
#: Pause before the first reconnect attempt of an outage; it doubles per failed attempt...
RECONNECT_FIRST_WAIT_S = 0.25
#: ...up to this cap, each pause jittered (see ``backoff_delay_s``).
RECONNECT_MAX_WAIT_S = 5.0
#: Bound on establishing the first connection.
CONNECT_TIMEOUT_S = 5.0
#: Bound on closing (drain is not used: pending requests are abandoned on close).
CLOSE_TIMEOUT_S = 5.0
#: Core messages buffered between nats-py's callback and the Trio reader before backpressure.
SUBSCRIBE_BUFFER_MSGS = 256
#: KV changes buffered between nats-py's callback and the Trio reader before backpressure.
WATCH_BUFFER_ENTRIES = 256
#: How long an unused watch consumer lingers on the server after its subscriber vanished.
WATCH_INACTIVE_THRESHOLD_S = 60.0
#: Extra time a fetch may take beyond its own timeout before the Trio side gives up on it.
FETCH_GRACE_S = 1.0
#: Taken off a pull request's ``expires`` so the server ends it before the fetch's own deadline
#: (nats-py does the same).
PULL_EXPIRES_MARGIN_NS = 100_000
#: Distinct header names whose validity the request fast path remembers.
HEADER_KEYS_CACHED = 64
#: Largest chunk one socket read asks for. asyncio's default (256 KiB) is past glibc's mmap
#: threshold, so every read of a ~300-byte reply mapped and unmapped a fresh 256 KiB buffer
#: (``just bench`` shows the cost); the parser takes any chunking, so a smaller read loses
#: nothing but the odd extra read of a very large burst.
SOCKET_READ_BYTES_MAX = 64 * 1024
#: Bytes of the fixed first line of a NATS header block (``NATS/1.0\r\n``).
_HDR_LINE = b"NATS/1.0"


# ---------------------------------------------------------------------------------------------
# Error mapping.
# ---------------------------------------------------------------------------------------------


def _map_exception(exc: BaseException, what: str) -> TransportError | None:
    """The interface's error for a nats-py exception, or None when ``exc`` is not nats-py's."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, nats.js.errors.APIError):
        return api_error(exc.code, exc.err_code, exc.description, what)
    if isinstance(exc, nats.errors.NoRespondersError):
        return NoResponders(f"{what}: no responders")
    if isinstance(exc, TimeoutError):  # nats.errors.TimeoutError and asyncio's
        return TransportTimeout(f"{what}: no answer in time")
    if isinstance(exc, nats.errors.ConnectionClosedError):
        return Closed(f"{what}: connection closed")
    if isinstance(exc, nats.errors.Error):
        return TemporarilyUnavailable(f"{what}: {exc}")
    return None


def _status_error(msg: Msg, what: str) -> TransportError:
    """The error a pull request's status message carries (nats-py's ``APIError.from_msg``)."""
    headers = msg.headers or {}
    status = headers.get(_STATUS, "")
    code = int(status) if status.isdigit() else None
    return api_error(code, None, headers.get("Description", ""), what)


# ---------------------------------------------------------------------------------------------
# Message conversion (pure).
# ---------------------------------------------------------------------------------------------


def _headers_of(msg: Msg) -> dict[str, str]:
    return dict(msg.headers) if msg.headers else {}


# ---------------------------------------------------------------------------------------------
# Deliveries.
# ---------------------------------------------------------------------------------------------


@final
class NatsDelivery:
    """One delivery from a pull consumer; settles by publishing to the message's reply subject."""

    __slots__ = ("_reply", "_settled", "_transport", "data", "headers", "num_delivered",
                 "stream_seq", "subject")  # fmt: skip

    def __init__(self, transport: NatsTransport, msg: Msg) -> None:
        meta = msg.metadata
        self.subject: str = msg.subject
        self.data: bytes = msg.data
        self.headers: Headers = _headers_of(msg)
        self.stream_seq: int = meta.sequence.stream
        self.num_delivered: int = meta.num_delivered
        self._reply: str = msg.reply
        self._transport = transport
        self._settled = False

    def __repr__(self) -> str:
        return (
            f"NatsDelivery(subject={self.subject!r}, stream_seq={self.stream_seq}, "
            f"num_delivered={self.num_delivered})"
        )

    async def ack(self) -> None:
        if self._settled:
            return
        await self._transport._request(self._reply, b"+ACK", None, "ack")
        self._settled = True

    async def ack_nowait(self) -> None:
        if self._settled:
            return
        if not self._transport._write_now(self._reply, b"+ACK"):
            await self._transport.core_publish(self._reply, b"+ACK")
        self._settled = True

    async def nak(self, delay_s: float | None = None) -> None:
        if self._settled:
            return
        payload = b"-NAK"
        if delay_s is not None and delay_s > 0:
            payload += b" " + json.dumps({"delay": ns(delay_s)}).encode()
        await self._transport.core_publish(self._reply, payload)
        self._settled = True

    async def in_progress(self) -> None:
        if not self._settled:
            await self._transport.core_publish(self._reply, b"+WPI")

    async def term(self) -> None:
        if self._settled:
            return
        await self._transport.core_publish(self._reply, b"+TERM")
        self._settled = True


# ---------------------------------------------------------------------------------------------
# The request fast path.
# ---------------------------------------------------------------------------------------------

_HEADER_KEY = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
_BAD_SUBJECT = re.compile(r"\s")
_STATUS = "Status"
_NO_RESPONDERS_STATUS = "503"


@functools.lru_cache(maxsize=HEADER_KEYS_CACHED)
def _header_key_ok(key: str) -> bool:
    """Header names are a handful of constants, checked on every request: checked once each."""
    return _HEADER_KEY.match(key) is not None


class _ReplyMux:
    """Answers to requests, handed straight from nats-py's read loop to the waiting Trio task.

    ``nc.request`` costs several asyncio steps per call under trio-asyncio (a task for the
    request, the flusher task, the reply subscription's task, the future's callbacks), each a
    trip through the trio-asyncio scheduler, several times the cost on plain asyncio. This
    path writes the request to nats-py's socket transport directly from Trio and registers this
    object as the ``_future`` of a wildcard reply subscription, which nats-py resolves inline in
    its read loop (the path it uses for old-style requests); ``set_result`` then reschedules the
    Trio task. One asyncio step per request instead of five.

    It relies on nats-py 2.16 internals (``_transport``, ``_pending_data_size``, a
    subscription's ``_future``); :meth:`NatsTransport._request` uses it only while nothing is
    queued in nats-py's own buffer (so commands stay in order) and the connection is up, and
    falls back to ``nc.request`` otherwise.
    """

    def __init__(self, prefix: str, timeout_s: float) -> None:
        self.prefix = prefix
        self._strip = len(prefix)
        self._next = 0
        self._waiters: dict[str, trio.lowlevel.Task] = {}
        # Requests with the connection's own timeout, oldest first: (deadline, token, subject).
        # A cancel scope per request showed up in profiles of the request path; instead one
        # watchdog (:meth:`watch`) wakes at the oldest deadline still waited on.
        # One timeout, a monotonic clock: the deadlines are in order, so a deque is a heap.
        self._timeout = timeout_s
        self._deadlines: deque[tuple[float, str, str]] = deque()
        self._alarm: trio.CancelScope | None = None

    # nats-py calls these on a subscription's future, inside its read loop (the Trio thread).
    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return False

    def set_result(self, msg: Msg) -> None:
        task = self._waiters.pop(msg.subject[self._strip :], None)
        if task is not None:
            trio.lowlevel.reschedule(task, outcome.Value(msg))
            self._forget_answered()

    def _forget_answered(self) -> None:
        """Drop answered (or abandoned) requests from the front, so only those in flight stay."""
        pending, waiters = self._deadlines, self._waiters
        while pending and pending[0][1] not in waiters:
            pending.popleft()

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fail every request still unanswered at its deadline with :class:`TransportTimeout`.

        Sleeps until the oldest deadline of a request in flight (a request that enters an
        empty queue moves the alarm forward), so a timeout fires when it is due, as a cancel
        scope of its own would. Until this runs, and after it stops, requests fall back to a
        cancel scope each.
        """
        pending, waiters = self._deadlines, self._waiters
        task_status.started()
        try:
            while True:
                now = trio.current_time()
                while pending:
                    deadline, token, subject = pending[0]
                    if token in waiters:
                        if deadline > now:
                            break
                        trio.lowlevel.reschedule(
                            waiters.pop(token),
                            outcome.Error(
                                TransportTimeout(
                                    f"request to {subject!r}: no answer in {self._timeout}s"
                                )
                            ),
                        )
                    pending.popleft()
                with trio.CancelScope(deadline=pending[0][0] if pending else math.inf) as alarm:
                    self._alarm = alarm
                    await trio.sleep_forever()
        finally:
            self._alarm = None

    @staticmethod
    def encodable(subject: str, headers: Mapping[str, str] | None) -> bool:
        """Only what needs no escaping takes the fast path; nats-py validates the rest."""
        if not subject or _BAD_SUBJECT.search(subject):
            return False
        if headers:
            for key, value in headers.items():
                if not _header_key_ok(key) or "\r" in value or "\n" in value:
                    return False
        return True

    async def request(
        self,
        nc: NatsClient,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        timeout_s: float,
    ) -> Msg:
        self._next += 1
        token = str(self._next)
        reply = self.prefix + token
        if headers:
            hdr = (
                b"NATS/1.0\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode()
                + b"\r\n"
            )
            size = len(hdr)
            cmd = (
                f"HPUB {subject} {reply} {size} {size + len(payload)}\r\n".encode()
                + hdr
                + payload
                + b"\r\n"
            )
        else:
            cmd = f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n"

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiters.pop(token, None)
            return trio.lowlevel.Abort.SUCCEEDED

        alarm = self._alarm
        if alarm is not None and timeout_s == self._timeout:
            deadline = trio.current_time() + timeout_s
            self._deadlines.append((deadline, token, subject))
            if alarm.deadline > deadline:  # the queue was empty: the watchdog sleeps forever
                alarm.deadline = deadline
            self._waiters[token] = trio.lowlevel.current_task()
            writer: Any = nc._transport
            try:
                writer.write(cmd)
            except BaseException:
                self._waiters.pop(token, None)
                raise
            msg: Msg = await trio.lowlevel.wait_task_rescheduled(abort)
            return msg
        with trio.move_on_after(timeout_s):
            self._waiters[token] = trio.lowlevel.current_task()
            writer = nc._transport
            try:
                writer.write(cmd)
            except BaseException:
                self._waiters.pop(token, None)
                raise
            msg = await trio.lowlevel.wait_task_rescheduled(abort)
            return msg
        raise TransportTimeout(f"request to {subject!r}: no answer in {timeout_s}s")


#: Statuses that end a pull request without an error: no messages (404), expired (408), and the
#: conflicts nats-py also treats as temporary (409: leadership change, consumer deleted, limits).
_PULL_END_STATUSES = frozenset({"404", "408", "409"})
_HEARTBEAT_STATUS = "100"


class _PullRequest:
    """One pull request still open on the server, with the deliveries it may still bring."""

    __slots__ = ("owed",)

    def __init__(self, owed: int) -> None:
        self.owed = owed


class _PullInbox:
    """One pull consumer's inbox: deliveries handed from nats-py's read loop to Trio.

    nats-py's ``fetch`` costs a run of asyncio steps under trio-asyncio (the fetch task, the
    flusher, a queue get with a timeout per message) and, for a batch above 1, waits for the
    server's closing status after the last message. This inbox is instead the ``_future`` of a
    plain subscription (as :class:`_ReplyMux` is), so nats-py hands each message over inline
    in its read loop. A fetch sends ``{"batch", "expires", "no_wait": true}`` (the server holds
    it until a first message, delivers what it has, then ends it with a 404), wakes on the first
    message and takes only what is already here. Deliveries of a request that arrive after its
    fetch returned stay in ``ready`` and the next fetch takes them first: none is dropped here.

    The server serves one consumer's waiting requests in the order they came, so the open
    requests are tracked in that order: a delivery counts against the oldest, a status ends it.
    That bookkeeping only decides when a fetch gives up early with []; it never loses a message.
    """

    def __init__(self, inbox: str, next_subject: str) -> None:
        self.inbox = inbox
        self.next_subject = next_subject
        self.ready: deque[Msg] = deque()
        self.open: deque[_PullRequest] = deque()
        self.failure: Msg | None = None
        self._waiters: set[trio.lowlevel.Task] = set()

    # nats-py calls these on a subscription's future, inside its read loop (the Trio thread).
    def cancelled(self) -> bool:
        return False

    def done(self) -> bool:
        return False

    def set_result(self, msg: Msg) -> None:
        if msg.reply:  # a delivery; a status has no reply subject
            self.ready.append(msg)
            if self.open:
                head = self.open[0]
                head.owed -= 1
                if head.owed <= 0:
                    self.open.popleft()
        else:
            status = msg.headers.get(_STATUS) if msg.headers else None
            if status == _HEARTBEAT_STATUS:
                return
            if self.open:
                self.open.popleft()
            if status not in _PULL_END_STATUSES:
                self.failure = msg
        if self._waiters:
            waiters, self._waiters = self._waiters, set()
            for task in waiters:
                trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Until the next message or status arrives (the caller bounds the wait)."""
        task = trio.lowlevel.current_task()
        self._waiters.add(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiters.discard(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def forget_through(self, request: _PullRequest) -> None:
        """After a fetch's deadline: the server has expired this request and those before it."""
        if request in self.open:
            while self.open and self.open.popleft() is not request:
                pass

    def take(self, batch: int) -> list[Msg]:
        ready = self.ready
        return [ready.popleft() for _ in range(min(batch, len(ready)))]


class _Resume:
    """Awaitable that finishes a coroutine which suspended while being driven by hand.

    ``coro`` yielded ``first`` (an asyncio future, or None for a bare yield) to whoever drove
    it; awaiting this inside an asyncio task hands that value on to the task, as if the task
    had been driving ``coro`` from the start.
    """

    def __init__(self, coro: Any, first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Any:
        coro, value = self._coro, self._first
        while True:
            try:
                yield value
            except BaseException as exc:  # cancellation of the task: pass it in
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                value = coro.send(None)
            except StopIteration as stop:
                return stop.value


class _DirectReader:
    """Parses what the socket delivers right where asyncio hands it over.

    nats-py's read loop is an asyncio task: each chunk goes socket -> protocol ->
    ``StreamReader`` -> a future -> a task step of ``_read_loop`` -> the parser, each step a
    trip through trio-asyncio's queue. Installed as the connection protocol's
    ``data_received``, this runs the same parser on the chunk at once. The parser never
    suspends on this transport's paths (requests and pull inboxes resolve futures inline, core
    subscriptions put into a queue); when it does (an ordered consumer resetting, a slow error
    callback), the rest of that parse and every chunk after it are handed, in order, to an
    asyncio task, and the direct path resumes once it has caught up. End of stream and
    connection loss still reach the ``StreamReader``, so nats-py's own read loop notices them
    and reconnects exactly as before; the new connection simply has no direct reader.
    """

    def __init__(self, loop: Any, nc: NatsClient, original: Callable[[bytes], None]) -> None:
        self._loop = loop
        self._nc = nc
        self._parse = nc._ps.parse
        self._original = original
        self._backlog: deque[bytes] | None = None

    def data_received(self, data: bytes) -> None:
        if self._backlog is not None:
            self._backlog.append(data)
            return
        coro = self._parse(data)
        try:
            first = coro.send(None)
        except StopIteration:
            return
        except Exception as exc:
            self._failed(exc)
            return
        self._backlog = deque()
        self._loop.create_task(self._catch_up(_Resume(coro, first)))

    async def _catch_up(self, rest: _Resume) -> None:
        try:
            await rest
            while self._backlog:
                await self._parse(self._backlog.popleft())
        except Exception as exc:
            self._failed(exc)
        finally:
            self._backlog = None

    def _failed(self, exc: Exception) -> None:
        """What nats-py's read loop does with a parse failure: treat it as a broken link."""
        _log.debug("nats connection: parse failed: %r", exc)
        if not isinstance(exc, (OSError, nats.errors.ProtocolError)):
            exc = nats.errors.ProtocolError()
        self._loop.create_task(self._nc._process_op_err(exc))


# ---------------------------------------------------------------------------------------------
# The transport.
# ---------------------------------------------------------------------------------------------


async def _hand_over(loop: Any, send: trio.MemorySendChannel[T], item: T) -> None:
    """Pass ``item`` from a nats-py callback (asyncio side) to a Trio reader.

    The callback runs inside the Trio thread (trio-asyncio steps asyncio from a Trio task), so
    the channel's synchronous send is safe; only when the buffer is full does it wait, as a Trio
    task, which also holds nats-py back from calling the next callback (backpressure).
    """
    try:
        send.send_nowait(item)
    except trio.WouldBlock:
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            await trio_asyncio.trio_as_aio(send.send, loop=loop)(item)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass


async def _run_shielded(
    loop: Any,
    coro: Coroutine[Any, Any, T],
    what: str,
    undo: Callable[[T], Coroutine[Any, Any, object]] | None = None,
) -> T:
    """Run ``coro`` as an asyncio task and wait for it; cancelling the wait never cancels it.

    This is why a dropped client could break the connection: trio-asyncio's own
    ``run_aio_coroutine`` cancels the asyncio task when the Trio caller is cancelled, and nats-py
    is not safe against that. A ``flush`` cancelled while its PONG is due leaves its cancelled
    future queued in the client's list of pongs; the PONG then pops it, ``set_result`` raises
    ``InvalidStateError`` inside the read loop, and the connection goes through reconnects that
    meet the same state again (every route answered 503 while the process looked healthy). A
    ``subscribe`` cancelled after its SUB went out also left a subscription nobody owned.

    Here a cancelled caller stops waiting at once (Trio's cancellation is prompt), while the
    task runs on to its own end, bounded by nats-py's own timeouts; nats-py never sees a future
    cancelled under it. What the abandoned task made is released by ``undo`` (an unsubscribe, a
    close). The task holds its error as a value (:func:`_captured`): a task still running when
    the loop closes must not raise into whoever closes it, as an abandoned one would.
    """
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        coro.close()  # never started: nothing to undo
        raise
    task: asyncio.Task[outcome.Outcome[T]] = loop.create_task(_captured(coro))
    try:
        await _wait_done(task)
    except BaseException:
        task.add_done_callback(functools.partial(_abandoned, loop, what, undo))
        raise
    if task.cancelled():  # cancelled by nats-py itself, or by the loop closing
        raise Closed(f"{what}: cancelled on the asyncio side")
    try:
        return task.result().unwrap()
    except Exception as exc:
        mapped = _map_exception(exc, what)
        if mapped is None:
            raise
        raise mapped from None


async def _captured(coro: Coroutine[Any, Any, T]) -> outcome.Outcome[T]:
    """asyncio side: ``coro``'s result or error as a value (a cancellation still cancels)."""
    try:
        return outcome.Value(await coro)
    except Exception as exc:
        return outcome.Error(exc)


async def _wait_done(future: asyncio.Future[Any]) -> None:
    """Until ``future`` is done; a cancelled wait leaves the future alone."""
    task = trio.lowlevel.current_task()
    waiting = True

    def wake(_: object) -> None:
        # asyncio runs done callbacks a loop step after completion, so an abort may come in
        # between: only a task still waiting may be rescheduled.
        if waiting:
            trio.lowlevel.reschedule(task)

    def abort(_: object) -> trio.lowlevel.Abort:
        nonlocal waiting
        waiting = False
        future.remove_done_callback(wake)
        return trio.lowlevel.Abort.SUCCEEDED

    future.add_done_callback(wake)
    await trio.lowlevel.wait_task_rescheduled(abort)


def _abandoned(
    loop: Any,
    what: str,
    undo: Callable[[Any], Coroutine[Any, Any, object]] | None,
    task: asyncio.Task[outcome.Outcome[Any]],
) -> None:
    """A task whose caller was cancelled has ended: release what it made, keep its error quiet."""
    if task.cancelled():
        return
    result: outcome.Outcome[Any] = task.result()
    if isinstance(result, outcome.Error):
        _log.debug("%s: finished after its caller left: %r", what, result.error)
        return
    if undo is not None:
        cleanup = loop.create_task(_captured(undo(result.unwrap())))
        cleanup.add_done_callback(functools.partial(_abandoned, loop, f"undo {what}", None))


@final
class NatsTransport(JetStreamOverRequests):
    """:class:`Transport` over one nats-py connection; create with
    :func:`open_nats_py_transport` (or ``open_nats_transport(..., client="nats-py")``)."""

    def __init__(self, loop: Any, nc: NatsClient, request_timeout_s: float) -> None:
        self._loop = loop
        self._nc = nc
        self._js: JetStreamContext = nc.jetstream(timeout=request_timeout_s)
        self._timeout = request_timeout_s
        self._round_trips = 0
        self._closed = False
        self._pulls: dict[tuple[str, str], _PullInbox] = {}
        self._kv_handles: dict[str, Any] = {}
        self._mux: _ReplyMux | None = None
        self._subscriptions = 0

    @property
    def round_trips(self) -> int:
        return self._round_trips

    # --- the one hop ---------------------------------------------------------------------------

    async def _aio(
        self,
        coro: Coroutine[Any, Any, T],
        what: str,
        undo: Callable[[T], Coroutine[Any, Any, object]] | None = None,
    ) -> T:
        """Run one nats-py coroutine on the asyncio side, mapping its errors; a cancelled
        caller leaves it running to its end and ``undo`` releases what it made (see
        :func:`_run_shielded`)."""
        if self._closed:
            coro.close()
            raise Closed(f"{what}: transport closed")
        return await _run_shielded(self._loop, coro, what, undo)

    @property
    def open_subscriptions(self) -> int:
        """Subscriptions this transport holds on its connection right now (the request and
        pull inboxes, core subscriptions, watches); for tests and diagnostics: a caller that
        left without releasing one shows here."""
        return self._subscriptions

    async def _subscribe_counted(self, subject: str, **options: Any) -> Any:
        """asyncio side: a nats-py subscription, counted until :meth:`_unsubscribe_counted`."""
        sub = await self._nc.subscribe(subject, **options)
        self._subscriptions += 1
        return sub

    async def _unsubscribe_counted(self, sub: Any) -> None:
        """asyncio side: the end of a subscription (a closed connection has none left either)."""
        try:
            await sub.unsubscribe()
        finally:
            self._subscriptions -= 1

    async def _flushed(self, sub: Any) -> Any:
        """asyncio side: ``sub`` once the server has it; released when the flush fails."""
        try:
            await self._nc.flush(timeout=int(max(1.0, self._timeout)))
        except BaseException:
            await self._unsubscribe_counted(sub)
            raise
        return sub

    async def _request(
        self,
        subject: str,
        payload: bytes,
        headers: dict[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> Msg:
        if self._closed:
            raise Closed(f"{what}: transport closed")
        self._round_trips += 1
        timeout = self._timeout if timeout_s is None else timeout_s
        nc, mux = self._nc, self._mux
        if (
            mux is not None
            and nc._pending_data_size == 0
            and nc.is_connected
            and len(payload) <= nc._max_payload
            and mux.encodable(subject, headers)
        ):
            try:
                msg = await mux.request(nc, subject, payload, headers, timeout)
            except (OSError, RuntimeError, AttributeError) as exc:  # the socket went away
                raise TemporarilyUnavailable(f"{what}: {exc!r}") from None
            if msg.headers and msg.headers.get(_STATUS) == _NO_RESPONDERS_STATUS and not msg.data:
                raise NoResponders(f"{what}: no responders")
            return msg
        return await self._aio(nc.request(subject, payload, timeout, False, headers), what)

    async def _js_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> bytes:
        hdrs = dict(headers) if headers is not None else None
        return (await self._request(subject, payload, hdrs, what, timeout_s)).data

    def _write_now(self, subject: str, payload: bytes, reply: str = "") -> bool:
        """A core publish written straight to the socket, as the request fast path writes
        (no asyncio step); False when it must go through nats-py (something is queued there,
        so writing now would reorder commands, or the connection is not up)."""
        nc = self._nc
        if (
            self._closed
            or self._mux is None
            or nc._pending_data_size != 0
            or not nc.is_connected
            or not _ReplyMux.encodable(subject, None)
            or (reply and not _ReplyMux.encodable(reply, None))
        ):
            return False
        writer: Any = nc._transport
        try:
            head = f"PUB {subject} {reply} {len(payload)}\r\n" if reply else None
            head = head or f"PUB {subject} {len(payload)}\r\n"
            writer.write(head.encode() + payload + b"\r\n")
        except (OSError, RuntimeError, AttributeError):
            return False
        return True

    async def _start_fast_path(self) -> None:
        """Subscribe the reply mux; without the nats-py internals it needs, stay on nc.request."""
        nc = self._nc
        try:
            prefix = f"{nc._inbox_prefix.decode()}.{nc._nuid.next().decode()}."
            _ = (nc._transport, nc._pending_data_size, nc._max_payload)
        except AttributeError:  # pragma: no cover - another nats-py version
            _log.warning("nats-py internals changed; requests take the slower nc.request path")
            return
        mux = _ReplyMux(prefix, self._timeout)
        await self._aio(self._subscribe_future(prefix + "*", mux), "reply subscription")
        self._mux = mux
        self._install_direct_reader()

    def _install_direct_reader(self) -> None:
        """Parse incoming data without nats-py's read-loop task (see :class:`_DirectReader`)."""
        nc = self._nc
        link: Any = nc._transport
        try:
            reader = link._io_reader
            protocol = link._io_writer._protocol
            original = protocol.data_received
            _ = nc._ps.parse
        except AttributeError:  # pragma: no cover - another nats-py or asyncio version
            return
        if reader is None or len(reader._buffer) != 0:
            return  # something is already queued for the read loop; keep its order
        protocol.data_received = _DirectReader(self._loop, nc, original).data_received
        socket_link: Any = getattr(link._io_writer, "transport", None)
        if isinstance(getattr(socket_link, "max_size", None), int):
            socket_link.max_size = SOCKET_READ_BYTES_MAX

    async def _subscribe_future(self, subject: str, future: _ReplyMux | _PullInbox) -> Any:
        """asyncio side: a subscription nats-py resolves inline, live on the server on return."""
        return await self._flushed(await self._subscribe_counted(subject, future=future))

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        stream = kv_stream(bucket)
        strip = len(kv_prefix(bucket))
        send, receive = trio.open_memory_channel[KvEntry](WATCH_BUFFER_ENTRIES)

        async def on_msg(msg: Msg) -> None:
            key = msg.subject[strip:]
            if not key.startswith(prefix):
                return
            headers = _headers_of(msg)
            entry = KvEntry(
                bucket=bucket,
                key=key,
                value=None if is_delete_marker(headers) else msg.data,
                revision=msg.metadata.sequence.stream,
            )
            await _hand_over(self._loop, send, entry)

        async def watch() -> Any:  # asyncio side
            sub = await self._js.subscribe(
                watch_filter(bucket, prefix),
                stream=stream,
                cb=on_msg,
                ordered_consumer=True,
                deliver_policy=js_api.DeliverPolicy.NEW,
                inactive_threshold=WATCH_INACTIVE_THRESHOLD_S,
            )
            self._subscriptions += 1
            return sub

        self._round_trips += 1
        try:
            sub = await self._aio(watch(), f"watch {bucket!r}", self._unsubscribe_counted)
            try:
                async with receive:
                    yield receive
            finally:
                await self._quietly(self._unsubscribe_counted(sub))
        finally:
            send.close()
            receive.close()

    async def _quietly(self, coro: Coroutine[Any, Any, object]) -> None:
        """Cleanup that must neither hang nor fail the caller (runs shielded, bounded)."""
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(CLOSE_TIMEOUT_S),
            suppress(TransportError),
        ):
            await self._aio(coro, "cleanup")

    # --- durable pull consumers ----------------------------------------------------------------

    async def ensure_consumer(self, config: ConsumerConfig) -> None:
        stream = check_name("stream", config.stream)
        durable = check_name("durable", config.durable)
        body: dict[str, Any] = {
            "durable_name": durable,
            "filter_subject": config.filter_subject,
            "ack_policy": "explicit",
            "ack_wait": ns(config.ack_wait_s),
            "max_deliver": config.max_deliver,
            "deliver_policy": "all",
        }
        if config.backoff_s:
            body["backoff"] = [ns(wait) for wait in config.backoff_s]
        await self._api(
            f"$JS.API.CONSUMER.CREATE.{stream}.{durable}",
            {"stream_name": stream, "config": body},
            f"ensure consumer {stream}/{durable}",
        )

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]:
        if batch < 1:
            raise ValueError(f"fetch batch must be at least 1, got {batch}")
        pull = self._pulls.get((stream, durable))
        if pull is None:
            pull = await self._bind(stream, durable)
        if pull.ready:  # left by an earlier request: no need to ask
            return [NatsDelivery(self, m) for m in pull.take(batch)]
        what = f"fetch {stream}/{durable}"
        if self._closed:
            raise Closed(f"{what}: transport closed")
        expires = ns(timeout_s) - PULL_EXPIRES_MARGIN_NS
        body: dict[str, Any] = {"batch": batch, "no_wait": True}
        if expires > 0:
            body["expires"] = expires
        request = _PullRequest(batch)
        pull.open.append(request)
        pull.failure = None
        self._round_trips += 1
        try:
            await self._send(pull.next_subject, json.dumps(body).encode(), pull.inbox, what)
        except BaseException:
            pull.forget_through(request)
            raise
        with trio.move_on_after(timeout_s + FETCH_GRACE_S):
            while not pull.ready:
                failure = pull.failure
                if failure is not None:
                    pull.failure = None
                    raise _status_error(failure, what)
                if request not in pull.open:  # ended (404/408) with nothing for us
                    return []
                await pull.wait()
            return [NatsDelivery(self, m) for m in pull.take(batch)]
        pull.forget_through(request)
        return []

    async def _bind(self, stream: str, durable: str) -> _PullInbox:
        # Check the consumer first: pulling from a missing one would just time out every fetch.
        api = f"{check_name('stream', stream)}.{check_name('durable', durable)}"
        await self._api(f"$JS.API.CONSUMER.INFO.{api}", {}, f"consumer {stream}/{durable}")
        pull = self._pulls.get((stream, durable))
        if pull is None:  # (another task may have bound it meanwhile)
            pull = _PullInbox(self._nc.new_inbox(), f"$JS.API.CONSUMER.MSG.NEXT.{api}")
            sub = await self._aio(
                self._subscribe_future(pull.inbox, pull),
                f"bind {stream}/{durable}",
                self._unsubscribe_counted,
            )
            bound = self._pulls.setdefault((stream, durable), pull)
            if bound is not pull:  # another task bound it while this one subscribed
                await self._quietly(self._unsubscribe_counted(sub))
            pull = bound
        return pull

    async def _send(self, subject: str, payload: bytes, reply: str, what: str) -> None:
        """A core publish with a reply subject: straight to the socket when possible."""
        if not self._write_now(subject, payload, reply):
            await self._aio(self._nc.publish(subject, payload, reply=reply), what)

    # --- core NATS -----------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        await self._aio(
            self._nc.publish(subject, data, headers=dict(headers) if headers else None),
            f"publish {subject!r}",
        )

    @asynccontextmanager
    async def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AsyncIterator[AsyncIterator[CoreMsg]]:
        send, receive = trio.open_memory_channel[CoreMsg](SUBSCRIBE_BUFFER_MSGS)

        async def on_msg(msg: Msg) -> None:
            core = CoreMsg(
                subject=msg.subject,
                data=msg.data,
                headers=_headers_of(msg),
                reply=msg.reply or None,
            )
            await _hand_over(self._loop, send, core)

        self._round_trips += 1  # the flush that makes the subscription live before we return
        try:
            sub = await self._aio(
                self._subscribe_live(subject, queue or "", on_msg),
                f"subscribe {subject!r}",
                self._unsubscribe_counted,
            )
            try:
                async with receive:
                    yield receive
            finally:
                await self._quietly(self._unsubscribe_counted(sub))
        finally:
            send.close()
            receive.close()

    async def _subscribe_live(
        self, subject: str, queue: str, cb: Callable[[Msg], Awaitable[None]]
    ) -> Any:
        """asyncio side: subscribe, then flush so the server knows before anyone publishes."""
        return await self._flushed(await self._subscribe_counted(subject, queue=queue, cb=cb))

    async def respond(self, msg: CoreMsg, data: bytes) -> None:
        if msg.reply is None:
            raise ValueError(f"message on {msg.subject!r} was not a request; nothing to respond to")
        await self.core_publish(msg.reply, data)

    async def request(
        self,
        subject: str,
        data: bytes,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        headers: Headers | None = None,
    ) -> bytes:
        msg = await self._request(
            subject, data, dict(headers) if headers else None, f"request {subject!r}", timeout_s
        )
        return bytes(msg.data)

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        what = "ping"
        if self._closed:
            raise Closed(f"{what}: transport closed")
        if not self._nc.is_connected:  # reconnecting: nothing would be answered now
            await trio.lowlevel.checkpoint()
            raise TemporarilyUnavailable(f"{what}: not connected to NATS")
        msg = await self._request("$JS.API.INFO", b"", None, what, timeout_s)
        err = json.loads(msg.data).get("error")
        if err is not None:
            raise json_error(err, what)

    # --- lifecycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            return
        # A socket the server already dropped (it vanished; the client was reconnecting) fails
        # the close's last flush with an OSError such as "Connection lost": closed all the same.
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(CLOSE_TIMEOUT_S),
            suppress(TransportError, OSError),
        ):
            await self._aio(self._nc.close(), "close")
        self._closed = True
        self._subscriptions = 0  # a closed connection holds none
        self._pulls.clear()
        self._kv_handles.clear()


async def _log_error(exc: Exception) -> None:
    _log.debug("nats connection: %r", exc)


@final
class _Reachability:
    """Says once that NATS is unreachable and once that it is back, per outage (nats-py calls
    ``disconnected`` once when it starts reconnecting, ``reconnected`` once when it is done,
    and logs every failed attempt only through ``_log_error``, at DEBUG); and paces the
    reconnect attempts with a capped, jittered backoff drawn from ``random``."""

    def __init__(self, servers: Sequence[str], random: Callable[[], float]) -> None:
        self._servers = ", ".join(servers)
        self._random = random
        self.client: NatsClient | None = None
        self._down_since: float | None = None

    def pace(self, servers: list[Any], info: dict[str, Any]) -> tuple[Any, float]:
        """nats-py's ``reconnect_to_server_handler``: any server of the pool, after a pause
        that grows with the failed attempts in a row (``Server.reconnects``)."""
        failures = min((srv.reconnects for srv in servers), default=0)
        delay = backoff_delay_s(
            failures, RECONNECT_FIRST_WAIT_S, RECONNECT_MAX_WAIT_S, self._random()
        )
        return None, delay

    async def disconnected(self) -> None:
        nc = self.client
        if nc is None or not nc.is_reconnecting:  # a close, not an outage
            return
        self._down_since = time.monotonic()
        _log.warning(
            "NATS is unreachable (%s): reconnecting, with attempts up to %.0f s apart, for as "
            "long as it takes; calls fail meanwhile",
            self._servers,
            RECONNECT_MAX_WAIT_S,
        )

    async def reconnected(self) -> None:
        down = 0.0 if self._down_since is None else time.monotonic() - self._down_since
        self._down_since = None
        _log.warning("NATS is back (%s) after %.1f s unreachable", self._servers, down)


def _single(exc: BaseException) -> BaseException:
    """The lone exception inside (nested) one-member groups, else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@asynccontextmanager
async def open_nats_py_transport(
    url_or_urls: str | Sequence[str],
    *,
    name: str | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    random: Callable[[], float] = DEFAULT_ENV.random,
) -> AsyncIterator[NatsTransport]:
    """A connected :class:`NatsTransport`; its asyncio loop lives exactly as long as the block.

    trio-asyncio's loop runs in nurseries, which wrap whatever the block raises in exception
    groups; a lone exception is unwrapped so ``except WrongLastSequence`` around the block works.
    ``random`` (uniform in [0, 1)) jitters the reconnect backoff.
    """
    servers = [url_or_urls] if isinstance(url_or_urls, str) else list(url_or_urls)
    if not servers:
        raise ValueError("open_nats_py_transport needs at least one server URL")
    try:
        async with trio_asyncio.open_loop() as loop:
            _skip_idle_synchronise(loop)
            nc = await _connect(loop, servers, name, connect_timeout_s, random)
            transport = NatsTransport(loop, nc, request_timeout_s)
            try:
                await transport._start_fast_path()
                async with trio.open_nursery() as nursery:
                    if transport._mux is not None:
                        await nursery.start(transport._mux.watch)
                    try:
                        yield transport
                    finally:
                        nursery.cancel_scope.cancel()
            finally:
                await transport.aclose()
    except BaseExceptionGroup as group:
        lone = _single(group)
        if lone is group:
            raise
        raise lone from None


def _skip_idle_synchronise(loop: Any) -> None:
    """Make this loop's socket readers skip trio-asyncio's synchronising pass when it is idle.

    trio-asyncio's reader task runs the socket's read callback, then ``await
    loop.synchronize()``: it queues a handle behind every callback the read scheduled and
    waits for the loop to reach it, so a reader never runs ahead of the asyncio work its data
    caused. On this transport's paths a read usually schedules nothing (:class:`_DirectReader`
    parses inline; replies and pull deliveries reschedule Trio tasks directly), and then the
    synchronise is only two more scheduler passes (the loop's, then the reader's) on every
    round trip. This reader does exactly what trio-asyncio's does, but synchronises only when
    the read left callbacks queued, so the bound it gives is kept whenever there is anything to
    bound; the reader still waits for readability (a scheduler pass) between reads, and data is
    parsed in the order it arrived either way. Only this transport's own loop is changed; if
    trio-asyncio's internals are not as expected, the loop is left as it is.
    """
    original = getattr(loop, "_io_task", None)
    queue = getattr(loop, "_q_send", None)
    if original is None or queue is None or not hasattr(queue, "statistics"):
        return
    # What ``queue.statistics().current_buffer_used`` counts, read without building the
    # statistics object on every socket read (it showed up in profiles).
    queued: deque[Any] | None = getattr(getattr(queue, "_state", None), "data", None)
    if not isinstance(queued, deque):
        queued = None

    async def io_task(fd: int, handle: Any, wait_ready: Any) -> None:
        if wait_ready is not trio.lowlevel.wait_readable:
            await original(fd, handle, wait_ready)
            return
        with handle._scope:
            try:
                while True:
                    if handle._cancelled:
                        break
                    try:
                        await wait_ready(fd)
                    except OSError:
                        if handle._cancelled:
                            break
                        raise
                    if handle._cancelled:
                        break
                    handle._run()
                    if queued if queued is not None else queue.statistics().current_buffer_used:
                        await loop.synchronize()
            except Exception as exc:
                handle._raise(exc)

    loop._io_task = io_task


async def _close_client(nc: NatsClient) -> None:
    await nc.close()


async def _connect(
    loop: Any,
    servers: list[str],
    name: str | None,
    connect_timeout_s: float,
    random: Callable[[], float],
) -> NatsClient:
    reach = _Reachability(servers, random)
    with trio.move_on_after(connect_timeout_s):
        try:
            nc: NatsClient = await _run_shielded(
                loop,
                nats.connect(
                    servers,
                    name=name,
                    connect_timeout=max(1, int(connect_timeout_s)),
                    allow_reconnect=True,
                    max_reconnect_attempts=MAX_RECONNECT_ATTEMPTS,
                    reconnect_to_server_handler=reach.pace,
                    error_cb=_log_error,
                    disconnected_cb=reach.disconnected,
                    reconnected_cb=reach.reconnected,
                ),
                "connect",
                _close_client,
            )
        except (TransportError, OSError) as exc:
            raise TemporarilyUnavailable(f"cannot connect to {servers}: {exc}") from None
        reach.client = nc
        return nc
    raise TransportTimeout(f"cannot connect to {servers} within {connect_timeout_s}s")
