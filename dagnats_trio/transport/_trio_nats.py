"""``TrioNatsTransport``: the transport on the native Trio client (``dagnats_trio.nats``).

No asyncio, no trio-asyncio, no private attribute of any other package: JetStream is reached
with plain requests to ``$JS.API.*`` on one :class:`~dagnats_trio.nats.Connection`, whose calls
are cancellation-safe at every await. The JetStream shapes (configs, error codes, KV
conventions) are the ones ``NatsTransport`` uses, so both pass one conformance suite.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from typing import Any, final

import trio

from ..nats import (
    Connection,
    ConnectionClosedError,
    Msg,
    NatsError,
    NatsTimeoutError,
    NoRespondersError,
    ProtocolError,
    Subscription,
    open_connection,
)
from ..nats import Headers as WireHeaders
from ._interface import (
    DEFAULT_REQUEST_TIMEOUT_S,
    BucketSpec,
    Closed,
    ConsumerConfig,
    CoreMsg,
    Delivery,
    Headers,
    KeyExists,
    KvEntry,
    NotFound,
    NotProvisioned,
    RevisionMismatch,
    StoredMsg,
    StreamSpec,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
    WrongLastSequence,
    check_msg_ttl,
)

#: Deadline of the first connection to a server.
CONNECT_TIMEOUT_S = 5.0
#: Bound on cleanup (deleting a watch consumer, closing) run shielded.
CLOSE_TIMEOUT_S = 5.0
#: How long a fetch waits past its own timeout for the server's end-of-request status.
FETCH_GRACE_S = 1.0
#: Taken off a pull request's ``expires`` so the server answers before our deadline.
PULL_EXPIRES_MARGIN_NS = 100_000
#: Deliveries a pull inbox buffers (more than any batch the runtime asks for).
PULL_BUFFER_MSGS = 4096
#: Entries a KV watch buffers before the newest are dropped (the reader never blocks).
WATCH_BUFFER_ENTRIES = 4096
#: A watch's ephemeral consumer is removed by the server this long after its client went away.
WATCH_INACTIVE_THRESHOLD_S = 60.0
#: Bound on the messages ``kv_keys`` walks (every stored revision under the prefix counts).
KV_KEYS_MAX_MESSAGES = 1_000_000

_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_MSG_ID = "Nats-Msg-Id"
_KV_OP = "KV-Operation"
_MSG_TTL = "Nats-TTL"
_KV_MARKER_REASON = "Nats-Marker-Reason"
_KV_DELETE_OPS = frozenset({"DEL", "PURGE"})
_ERR_WRONG_LAST_SEQ = frozenset({10071, 10164})
_ERR_STREAM_NOT_FOUND = 10059
_ERR_CONSUMER_NOT_FOUND = 10014
_ERR_NO_MESSAGE = 10037
_ERR_STREAM_NAME_IN_USE = 10058
#: Pull request ends: no messages (404), expired (408), a limit or leadership change (409).
_PULL_END_STATUSES = frozenset({404, 408})

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}\Z")
_KV_KEY = re.compile(r"^[-/_=.A-Za-z0-9]+\Z")


def _check_name(kind: str, value: str) -> str:
    if not _NAME.match(value):
        raise ValueError(f"{kind} {value!r} must be letters, digits, '_' or '-'")
    return value


def _check_key(key: str) -> str:
    if not _KV_KEY.match(key) or key.startswith(".") or key.endswith("."):
        raise ValueError(
            f"key {key!r} must be letters, digits and '-/_=.', not starting or ending with '.'"
        )
    return key


def _ns(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


class _NoResponders(TemporarilyUnavailable):
    """Nobody answered; for a publish this may also mean no stream owns the subject."""


class _StreamNameInUse(TransportError):
    """A create met an existing stream with another config: update it instead."""


def _api_error(code: Any, err_code: Any, description: Any, what: str) -> TransportError:
    text = f"{what}: {description} (code {code}, err_code {err_code})"
    if err_code in _ERR_WRONG_LAST_SEQ:
        return WrongLastSequence(text)
    if err_code in (_ERR_STREAM_NOT_FOUND, _ERR_CONSUMER_NOT_FOUND):
        return NotProvisioned(text)
    if err_code == _ERR_NO_MESSAGE:
        return NotFound(text)
    if err_code == _ERR_STREAM_NAME_IN_USE:
        return _StreamNameInUse(text)
    if code == 503:
        return TemporarilyUnavailable(text)
    if code == 408:
        return TransportTimeout(text)
    return TransportError(text)


def _map_error(exc: Exception, what: str) -> TransportError:
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, NoRespondersError):
        return _NoResponders(f"{what}: no responders")
    if isinstance(exc, NatsTimeoutError):
        return TransportTimeout(f"{what}: no answer in time")
    if isinstance(exc, ConnectionClosedError):
        return Closed(f"{what}: connection closed")
    return TransportError(f"{what}: {exc}")


def _headers_dict(headers: WireHeaders | None) -> dict[str, str]:
    return dict(headers.fields) if headers is not None else {}


def _wire_headers(headers: Mapping[str, str] | None) -> WireHeaders | None:
    return WireHeaders(fields=tuple(headers.items())) if headers else None


def _parse_header_block(raw: bytes) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in raw.split(b"\r\n")[1:]:
        if not line:
            continue
        name, _, value = line.partition(b":")
        headers[name.decode().strip()] = value.decode().strip()
    return headers


def _stored_from_api(message: Mapping[str, Any]) -> StoredMsg:
    hdrs = message.get("hdrs")
    data = message.get("data")
    return StoredMsg(
        subject=message["subject"],
        seq=int(message["seq"]),
        data=base64.b64decode(data) if data else b"",
        headers=_parse_header_block(base64.b64decode(hdrs)) if hdrs else {},
    )


def _is_delete_marker(headers: Mapping[str, str]) -> bool:
    return headers.get(_KV_OP) in _KV_DELETE_OPS or _KV_MARKER_REASON in headers


def _with_ttl(hdrs: dict[str, str], ttl_s: float | None) -> dict[str, str]:
    if ttl_s is not None:
        hdrs[_MSG_TTL] = f"{check_msg_ttl(ttl_s)}s"
    return hdrs


def _kv_stream(bucket: str) -> str:
    return f"KV_{_check_name('bucket', bucket)}"


def _kv_prefix(bucket: str) -> str:
    return f"$KV.{bucket}."


def _watch_filter(bucket: str, prefix: str) -> str:
    base = _kv_prefix(bucket)
    if prefix.endswith(".") and _KV_KEY.match(prefix) and not prefix.startswith("."):
        return f"{base}{prefix}>"
    return f"{base}>"


def ack_metadata(reply: str) -> tuple[int, int]:
    """``(num_delivered, stream_seq)`` from a ``$JS.ACK`` reply subject (both token layouts)."""
    tokens = reply.split(".")
    if len(tokens) == 9 and tokens[:2] == ["$JS", "ACK"]:
        return int(tokens[4]), int(tokens[5])
    if len(tokens) >= 12 and tokens[:2] == ["$JS", "ACK"]:
        return int(tokens[6]), int(tokens[7])
    raise TransportError(f"not a JetStream delivery: reply subject {reply!r}")


@final
class TrioNatsDelivery:
    """One delivery from a pull consumer; settles by publishing to its ``$JS.ACK`` subject."""

    __slots__ = ("_reply", "_settled", "_transport", "data", "headers", "num_delivered",
                 "stream_seq", "subject")  # fmt: skip

    def __init__(self, transport: TrioNatsTransport, msg: Msg) -> None:
        assert msg.reply is not None
        self.subject: str = msg.subject
        self.data: bytes = msg.payload
        self.headers: Headers = _headers_dict(msg.headers)
        self.num_delivered, self.stream_seq = ack_metadata(msg.reply)
        self._reply: str = msg.reply
        self._transport = transport
        self._settled = False

    def __repr__(self) -> str:
        return (
            f"TrioNatsDelivery(subject={self.subject!r}, stream_seq={self.stream_seq}, "
            f"num_delivered={self.num_delivered})"
        )

    async def ack(self) -> None:
        if self._settled:
            await trio.lowlevel.checkpoint()
            return
        await self._transport._raw_request(self._reply, b"+ACK", None, "ack")
        self._settled = True

    async def ack_nowait(self) -> None:
        await self._settle(b"+ACK", "ack")

    async def nak(self, delay_s: float | None = None) -> None:
        payload = b"-NAK"
        if delay_s is not None and delay_s > 0:
            payload += b" " + json.dumps({"delay": _ns(delay_s)}).encode()
        await self._settle(payload, "nak")

    async def in_progress(self) -> None:
        if self._settled:
            await trio.lowlevel.checkpoint()
            return
        await self._transport.core_publish(self._reply, b"+WPI")

    async def term(self) -> None:
        await self._settle(b"+TERM", "term")

    async def _settle(self, payload: bytes, what: str) -> None:
        if self._settled:
            await trio.lowlevel.checkpoint()
            return
        await self._transport.core_publish(self._reply, payload)
        self._settled = True


class _Pull:
    """One durable's pull inbox: a wildcard subscription; each fetch asks on its own token, so
    a late end-of-request status of an earlier fetch is told apart from this one's."""

    def __init__(self, sub: Subscription, prefix: str, next_subject: str) -> None:
        self.sub = sub
        self.prefix = prefix
        self.next_subject = next_subject
        self.tokens = itertools.count(1)
        self.taken: deque[Msg] = deque()

    def hand_out(self, transport: TrioNatsTransport, batch: int) -> list[Delivery]:
        """Up to ``batch`` of the deliveries taken from the inbox, oldest first."""
        out: list[Delivery] = []
        while self.taken and len(out) < batch:
            out.append(TrioNatsDelivery(transport, self.taken.popleft()))
        return out


@final
class _CoreMessages:
    """A subscription's messages as :class:`CoreMsg` (an iterator, not an async generator, so
    a consumer that stops early leaves nothing to finalise)."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub

    def __aiter__(self) -> _CoreMessages:
        return self

    async def __anext__(self) -> CoreMsg:
        msg = await self._sub.__anext__()
        return CoreMsg(
            subject=msg.subject,
            data=msg.payload,
            headers=_headers_dict(msg.headers),
            reply=msg.reply,
        )


@final
class _KvEntries:
    """A watch consumer's deliveries as :class:`KvEntry` (delete markers have no value)."""

    def __init__(self, sub: Subscription, bucket: str, prefix: str) -> None:
        self._sub = sub
        self._bucket = bucket
        self._prefix = prefix
        self._strip = len(_kv_prefix(bucket))

    def __aiter__(self) -> _KvEntries:
        return self

    async def __anext__(self) -> KvEntry:
        while True:
            msg = await self._sub.__anext__()
            if msg.status is not None or msg.reply is None:
                continue  # heartbeats and flow control are not asked for
            key = msg.subject[self._strip :]
            if not key.startswith(self._prefix):
                continue
            headers = _headers_dict(msg.headers)
            return KvEntry(
                bucket=self._bucket,
                key=key,
                value=None if _is_delete_marker(headers) else msg.payload,
                revision=ack_metadata(msg.reply)[1],
            )


@final
class TrioNatsTransport:
    """The :class:`~dagnats_trio.transport.Transport` on the native client."""

    def __init__(self, conn: Connection, request_timeout_s: float) -> None:
        self._conn = conn
        self._timeout_s = request_timeout_s
        self._round_trips = 0
        self._closed = False
        self._pulls: dict[tuple[str, str], _Pull] = {}
        self._pull_lock = trio.Lock()
        self._stack = AsyncExitStack()

    @property
    def round_trips(self) -> int:
        return self._round_trips

    @property
    def connection(self) -> Connection:
        """The wire connection (for tests and diagnostics)."""
        return self._conn

    # --- requests ------------------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise Closed(f"{what}: transport closed")

    async def _raw_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> Msg:
        self._check_open(what)
        self._round_trips += 1
        try:
            return await self._conn.request(
                subject,
                payload,
                headers=_wire_headers(headers),
                timeout_s=self._timeout_s if timeout_s is None else timeout_s,
            )
        except (NatsError, ProtocolError) as exc:
            raise _map_error(exc, what) from None

    async def _api(self, subject: str, body: Mapping[str, Any], what: str) -> dict[str, Any]:
        msg = await self._raw_request(subject, json.dumps(body).encode(), None, what)
        answer: dict[str, Any] = json.loads(msg.payload)
        err = answer.get("error")
        if err is not None:
            raise _api_error(err.get("code"), err.get("err_code"), err.get("description"), what)
        return answer

    # --- streams -------------------------------------------------------------------------------

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        hdrs = dict(headers) if headers else None
        if msg_id is not None:
            hdrs = hdrs or {}
            hdrs[_MSG_ID] = msg_id
        if expected_last_subject_seq is not None:
            hdrs = hdrs or {}
            hdrs[_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
        return await self._publish(subject, data, hdrs)

    async def _publish(self, subject: str, data: bytes, hdrs: dict[str, str] | None) -> int:
        try:
            msg = await self._raw_request(subject, data, hdrs, "publish")
        except _NoResponders:
            raise await self._why_no_stream(subject) from None
        ack = json.loads(msg.payload)
        err = ack.get("error")
        if err is not None:
            error = _api_error(
                err.get("code"), err.get("err_code"), err.get("description"),
                f"publish to {subject!r}",
            )  # fmt: skip
            if isinstance(error, WrongLastSequence) and hdrs and _MSG_ID in hdrs:
                # The expected sequence is checked before the duplicate window: a retry whose
                # first attempt was stored (ack lost) looks fenced; if the subject ends with
                # that very message, it is a duplicate.
                last = await self.get_last_msg(str(ack.get("stream")), subject)
                if last is not None and last.headers.get(_MSG_ID) == hdrs[_MSG_ID]:
                    return last.seq
            raise error
        seq: int = ack["seq"]
        return seq

    async def _why_no_stream(self, subject: str) -> TransportError:
        answer = await self._api("$JS.API.STREAM.NAMES", {"subject": subject}, "stream lookup")
        if not answer.get("streams"):
            return NotProvisioned(f"no stream stores subject {subject!r}; run provisioning")
        return TemporarilyUnavailable(f"the stream for {subject!r} did not answer")

    async def get_msg(self, stream: str, seq: int) -> StoredMsg:
        answer = await self._api(
            f"$JS.API.STREAM.MSG.GET.{_check_name('stream', stream)}",
            {"seq": seq},
            f"get {stream}#{seq}",
        )
        return _stored_from_api(answer["message"])

    async def get_last_msg(self, stream: str, subject: str) -> StoredMsg | None:
        try:
            answer = await self._api(
                f"$JS.API.STREAM.MSG.GET.{_check_name('stream', stream)}",
                {"last_by_subj": subject},
                f"last of {subject!r}",
            )
        except NotFound:
            return None
        return _stored_from_api(answer["message"])

    async def read_subject(
        self, stream: str, subject: str, from_seq: int, limit: int
    ) -> list[StoredMsg]:
        api_subject = f"$JS.API.STREAM.MSG.GET.{_check_name('stream', stream)}"
        out: list[StoredMsg] = []
        seq = max(from_seq, 1)
        while len(out) < limit:
            try:
                answer = await self._api(
                    api_subject, {"seq": seq, "next_by_subj": subject}, f"read {subject!r}"
                )
            except NotFound:
                break
            msg = _stored_from_api(answer["message"])
            out.append(msg)
            seq = msg.seq + 1
        if not out:
            await trio.lowlevel.checkpoint()
        return out

    async def purge_subject(self, stream: str, subject: str) -> None:
        await self._api(
            f"$JS.API.STREAM.PURGE.{_check_name('stream', stream)}",
            {"filter": subject},
            f"purge {subject!r}",
        )

    # --- key-value -----------------------------------------------------------------------------

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        last = await self._kv_last(bucket, key)
        if last is None or _is_delete_marker(last.headers):
            return None
        return KvEntry(bucket=bucket, key=key, value=last.data, revision=last.seq)

    async def _kv_last(self, bucket: str, key: str) -> StoredMsg | None:
        return await self.get_last_msg(_kv_stream(bucket), _kv_prefix(bucket) + _check_key(key))

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        _check_name("bucket", bucket)
        return await self._publish(_kv_prefix(bucket) + _check_key(key), value, None)

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, ttl_s: float | None = None
    ) -> int:
        _check_name("bucket", bucket)
        subject = _kv_prefix(bucket) + _check_key(key)
        try:
            return await self._publish(
                subject, value, _with_ttl({_EXPECTED_LAST_SUBJECT_SEQ: "0"}, ttl_s)
            )
        except WrongLastSequence:
            pass
        last = await self._kv_last(bucket, key)
        if last is None or not _is_delete_marker(last.headers):
            raise KeyExists(f"key {key!r} exists in bucket {bucket!r}") from None
        try:
            return await self._publish(
                subject, value, _with_ttl({_EXPECTED_LAST_SUBJECT_SEQ: str(last.seq)}, ttl_s)
            )
        except WrongLastSequence:
            raise KeyExists(f"key {key!r} exists in bucket {bucket!r}") from None

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        _check_name("bucket", bucket)
        try:
            return await self._publish(
                _kv_prefix(bucket) + _check_key(key),
                value,
                _with_ttl({_EXPECTED_LAST_SUBJECT_SEQ: str(revision)}, ttl_s),
            )
        except WrongLastSequence:
            raise RevisionMismatch(
                f"key {key!r} in bucket {bucket!r} is not at revision {revision}"
            ) from None

    async def kv_delete(self, bucket: str, key: str, revision: int | None = None) -> None:
        _check_name("bucket", bucket)
        hdrs = {_KV_OP: "DEL"}
        if revision is not None:
            hdrs[_EXPECTED_LAST_SUBJECT_SEQ] = str(revision)
        try:
            await self._publish(_kv_prefix(bucket) + _check_key(key), b"", hdrs)
        except WrongLastSequence:
            raise RevisionMismatch(
                f"key {key!r} in bucket {bucket!r} is not at revision {revision}"
            ) from None

    async def kv_keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Walk the bucket's stream with the leader's message get: no consumer."""
        stream = _kv_stream(bucket)
        subject = _watch_filter(bucket, prefix)
        strip = len(_kv_prefix(bucket))
        live: dict[str, bool] = {}
        seq = 1
        for _ in range(KV_KEYS_MAX_MESSAGES):
            found = await self.read_subject(stream, subject, seq, 1)
            if not found:
                break
            msg = found[0]
            key = msg.subject[strip:]
            if key.startswith(prefix):
                live[key] = not _is_delete_marker(msg.headers)
            seq = msg.seq + 1
        else:
            raise TransportError(
                f"keys of {bucket!r}: more than {KV_KEYS_MAX_MESSAGES} stored messages under "
                f"{prefix!r}"
            )
        return sorted(k for k, alive in live.items() if alive)

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        """An ephemeral push consumer (deliver new, no acks) on an inbox of our own."""
        stream = _kv_stream(bucket)
        what = f"watch {bucket!r}"
        self._check_open(what)
        inbox = self._conn.new_inbox()
        async with self._conn.subscribe(inbox, max_buffered_msgs=WATCH_BUFFER_ENTRIES) as sub:
            config = {
                "deliver_subject": inbox,
                "filter_subject": _watch_filter(bucket, prefix),
                "deliver_policy": "new",
                "ack_policy": "none",
                "max_deliver": 1,
                "mem_storage": True,
                "num_replicas": 1,
                "inactive_threshold": _ns(WATCH_INACTIVE_THRESHOLD_S),
            }
            answer = await self._api(
                f"$JS.API.CONSUMER.CREATE.{stream}",
                {"stream_name": stream, "config": config},
                what,
            )
            name = answer["name"]

            try:
                yield _KvEntries(sub, bucket, prefix)
            finally:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(CLOSE_TIMEOUT_S),
                    suppress(TransportError),
                ):
                    await self._api(f"$JS.API.CONSUMER.DELETE.{stream}.{name}", {}, what)

    # --- durable pull consumers ----------------------------------------------------------------

    async def ensure_consumer(self, config: ConsumerConfig) -> None:
        stream = _check_name("stream", config.stream)
        durable = _check_name("durable", config.durable)
        body: dict[str, Any] = {
            "durable_name": durable,
            "filter_subject": config.filter_subject,
            "ack_policy": "explicit",
            "ack_wait": _ns(config.ack_wait_s),
            "max_deliver": config.max_deliver,
            "deliver_policy": "all",
        }
        if config.backoff_s:
            body["backoff"] = [_ns(wait) for wait in config.backoff_s]
        await self._api(
            f"$JS.API.CONSUMER.CREATE.{stream}.{durable}",
            {"stream_name": stream, "config": body},
            f"ensure consumer {stream}/{durable}",
        )

    async def _pull(self, stream: str, durable: str) -> _Pull:
        key = (stream, durable)
        pull = self._pulls.get(key)
        if pull is not None:
            return pull
        async with self._pull_lock:
            pull = self._pulls.get(key)
            if pull is None:
                api = f"{_check_name('stream', stream)}.{_check_name('durable', durable)}"
                await self._api(f"$JS.API.CONSUMER.INFO.{api}", {}, f"consumer {stream}/{durable}")
                prefix = self._conn.new_inbox()
                sub = await self._stack.enter_async_context(
                    self._conn.subscribe(prefix + ".*", max_buffered_msgs=PULL_BUFFER_MSGS)
                )
                pull = _Pull(sub, prefix, f"$JS.API.CONSUMER.MSG.NEXT.{api}")
                self._pulls[key] = pull
            return pull

    async def fetch(
        self, stream: str, durable: str, batch: int, timeout_s: float
    ) -> list[Delivery]:
        if batch < 1:
            raise ValueError(f"fetch batch must be at least 1, got {batch}")
        what = f"fetch {stream}/{durable}"
        self._check_open(what)
        pull = await self._pull(stream, durable)
        taken = pull.taken
        with suppress(trio.WouldBlock, trio.EndOfChannel):  # left by an earlier request
            while len(taken) < batch:
                msg = pull.sub.next_msg_nowait()
                if msg.status is None and msg.reply is not None:
                    taken.append(msg)
        if taken:
            await trio.lowlevel.checkpoint()
            return pull.hand_out(self, batch)
        reply = f"{pull.prefix}.{next(pull.tokens)}"
        body: dict[str, Any] = {"batch": batch, "no_wait": True}
        expires = _ns(timeout_s) - PULL_EXPIRES_MARGIN_NS
        if expires > 0:
            body["expires"] = expires
        self._round_trips += 1
        try:
            await self._conn.publish(pull.next_subject, json.dumps(body).encode(), reply=reply)
        except (NatsError, ProtocolError) as exc:
            raise _map_error(exc, what) from None
        # Deliveries wait in ``pull.taken`` until returned: a fetch cancelled while waiting
        # for more leaves them to the next fetch instead of losing them until their AckWait.
        with trio.move_on_after(timeout_s + FETCH_GRACE_S):
            while len(taken) < batch:
                try:
                    msg = await pull.sub.next_msg()
                except trio.EndOfChannel:
                    raise Closed(f"{what}: transport closed") from None
                if msg.status is None:
                    if msg.reply is not None:
                        taken.append(msg)
                    continue
                if msg.subject != reply:
                    continue  # the end of an earlier fetch
                if msg.status in _PULL_END_STATUSES or taken:
                    break
                description = msg.headers.description if msg.headers else ""
                raise _api_error(msg.status, None, description, what)
        return pull.hand_out(self, batch)

    # --- core NATS -----------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        what = f"publish {subject!r}"
        self._check_open(what)
        try:
            await self._conn.publish(subject, data, headers=_wire_headers(headers))
        except (NatsError, ProtocolError) as exc:
            raise _map_error(exc, what) from None

    @asynccontextmanager
    async def subscribe(
        self, subject: str, queue: str | None = None
    ) -> AsyncIterator[AsyncIterator[CoreMsg]]:
        what = f"subscribe {subject!r}"
        self._check_open(what)
        async with self._conn.subscribe(subject, queue=queue) as sub:
            self._round_trips += 1  # the flush that makes the subscription live
            try:
                await self._conn.flush(timeout_s=self._timeout_s)
            except NatsError as exc:
                raise _map_error(exc, what) from None

            yield _CoreMessages(sub)

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
        msg = await self._raw_request(subject, data, headers, f"request {subject!r}", timeout_s)
        return msg.payload

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        what = "ping"
        self._check_open(what)
        if not self._conn.stats().connected:
            await trio.lowlevel.checkpoint()
            raise TemporarilyUnavailable(f"{what}: not connected to NATS")
        msg = await self._raw_request("$JS.API.INFO", b"", None, what, timeout_s)
        err = json.loads(msg.payload).get("error")
        if err is not None:
            raise _api_error(err.get("code"), err.get("err_code"), err.get("description"), what)

    # --- provisioning --------------------------------------------------------------------------

    async def ensure_stream(self, spec: StreamSpec, replicas: int = 1) -> None:
        name = _check_name("stream", spec.name)
        window = spec.duplicate_window_s
        if spec.max_age_s > 0:
            window = min(window, spec.max_age_s)
        config = {
            "name": name,
            "subjects": list(spec.subjects),
            "retention": "workqueue" if spec.work_queue else "limits",
            "max_age": _ns(spec.max_age_s),
            "duplicate_window": _ns(window),
            "num_replicas": replicas,
            "storage": "file",
            "discard": "old",
        }
        await self._create_or_update(name, config)

    async def ensure_bucket(self, spec: BucketSpec, replicas: int = 1) -> None:
        stream = _kv_stream(spec.name)
        window = 120.0 if spec.ttl_s <= 0 else min(120.0, spec.ttl_s)
        config = {
            "name": stream,
            "subjects": [f"$KV.{spec.name}.>"],
            "retention": "limits",
            "max_msgs_per_subject": spec.history,
            "max_age": _ns(spec.ttl_s),
            "duplicate_window": _ns(window),
            "num_replicas": replicas,
            "storage": "file",
            "discard": "new",
            "allow_rollup_hdrs": True,
            "deny_delete": True,
            "allow_direct": True,
        }
        if spec.message_ttl:
            config["allow_msg_ttl"] = True
        await self._create_or_update(stream, config)

    async def _create_or_update(self, name: str, config: Mapping[str, Any]) -> None:
        try:
            await self._api(f"$JS.API.STREAM.CREATE.{name}", config, f"create stream {name}")
        except _StreamNameInUse:
            await self._api(f"$JS.API.STREAM.UPDATE.{name}", config, f"update stream {name}")

    async def stream_info(self, stream: str) -> dict[str, Any]:
        """The server's stream info (JSON); for tests and diagnostics."""
        return await self._api(
            f"$JS.API.STREAM.INFO.{_check_name('stream', stream)}", {}, f"info {stream}"
        )

    # --- lifecycle -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
            await self._stack.aclose()
        self._pulls.clear()


@asynccontextmanager
async def open_trio_nats_transport(
    url_or_urls: str | Sequence[str],
    *,
    name: str | None = None,
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
) -> AsyncIterator[TrioNatsTransport]:
    """A connected :class:`TrioNatsTransport`; drained and closed when the block ends."""
    servers = [url_or_urls] if isinstance(url_or_urls, str) else list(url_or_urls)
    if not servers:
        raise ValueError("open_trio_nats_transport needs at least one server URL")
    async with open_connection(
        servers, name=name, connect_timeout_s=connect_timeout_s, max_reconnect_rounds=-1
    ) as conn:
        transport = TrioNatsTransport(conn, request_timeout_s)
        try:
            yield transport
        finally:
            await transport.aclose()
