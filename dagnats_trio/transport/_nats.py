"""`NatsTransport`: the :class:`Transport` protocol over nats-py, driven from Trio.

nats-py is asyncio code; trio-asyncio runs its event loop inside the Trio run. Every call crosses
into asyncio exactly once (an asyncio task for a nats-py coroutine, :func:`_run_shielded`), so
the hop cost is paid once per round trip, and a cancelled Trio caller never cancels nats-py
midway. JetStream API requests are sent as plain requests on their API
subjects and their JSON answers read here: that is one hop and gives the server's ``err_code``
for the typed errors. Nothing asyncio-flavoured leaves this module: messages are copied into the
interface's values, deliveries wrap only the reply subject, errors are mapped.

Only the public APIs of nats-py, asyncio and trio-asyncio are used (``tests/
test_no_private_access.py`` scans for anything else): requests go through ``nc.request``,
deliveries through a subscription's ``cb``. That costs a few asyncio steps per round trip more
than writing to nats-py's socket and driving its parser by hand did; the native client
(``TrioNatsTransport``, the default) is the fast path.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
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
# Pull inboxes.
# ---------------------------------------------------------------------------------------------

_STATUS = "Status"

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
    server's closing status after the last message. This inbox is instead fed by the callback
    of a plain subscription (nats-py's public ``cb``), which hands each message to the waiting
    Trio task. A fetch sends ``{"batch", "expires", "no_wait": true}`` (the server holds
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

    async def on_msg(self, msg: Msg) -> None:
        """nats-py's subscription callback (asyncio side, in the Trio thread): never waits."""
        self.deliver(msg)

    def deliver(self, msg: Msg) -> None:
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
        return await self._aio(
            self._nc.request(subject, payload, timeout=timeout, headers=headers), what
        )

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

    async def _subscribe_inbox(self, pull: _PullInbox) -> Any:
        """asyncio side: ``pull``'s subscription, live on the server on return."""
        return await self._flushed(await self._subscribe_counted(pull.inbox, cb=pull.on_msg))

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
                self._subscribe_inbox(pull),
                f"bind {stream}/{durable}",
                self._unsubscribe_counted,
            )
            bound = self._pulls.setdefault((stream, durable), pull)
            if bound is not pull:  # another task bound it while this one subscribed
                await self._quietly(self._unsubscribe_counted(sub))
            pull = bound
        return pull

    async def _send(self, subject: str, payload: bytes, reply: str, what: str) -> None:
        """A core publish with a reply subject."""
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
            nc = await _connect(loop, servers, name, connect_timeout_s, random)
            transport = NatsTransport(loop, nc, request_timeout_s)
            try:
                yield transport
            finally:
                await transport.aclose()
    except BaseExceptionGroup as group:
        lone = _single(group)
        if lone is group:
            raise
        raise lone from None


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
