"""What crosses between the native client and the transport's interface: errors, headers,
and the objects a caller is handed (a pull consumer's deliveries and its inbox, a core
subscription's messages, a KV watch's entries), each a thin view over a wire message.
"""

from __future__ import annotations

import itertools
import json
from collections import deque
from collections.abc import Mapping
from typing import TYPE_CHECKING, final

import trio

from ..nats import (
    ConnectionClosedError,
    Msg,
    NatsTimeoutError,
    NoRespondersError,
    Subscription,
)
from ..nats import Headers as WireHeaders
from ._errors import Closed, TransportError, TransportTimeout
from ._interface import Delivery
from ._jetstream_wire import NoResponders, is_delete_marker, kv_prefix, ns
from ._values import CoreMsg, Headers, KvEntry

if TYPE_CHECKING:
    from ._trio_nats import TrioNatsTransport


def map_error(exc: Exception, what: str) -> TransportError:
    """The interface's error for the native client's."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, NoRespondersError):
        return NoResponders(f"{what}: no responders")
    if isinstance(exc, NatsTimeoutError):
        return TransportTimeout(f"{what}: no answer in time")
    if isinstance(exc, ConnectionClosedError):
        return Closed(f"{what}: connection closed")
    return TransportError(f"{what}: {exc}")


def headers_dict(headers: WireHeaders | None) -> dict[str, str]:
    """A wire header block's fields as a dict (empty when there is none)."""
    return dict(headers.fields) if headers is not None else {}


def wire_headers(headers: Mapping[str, str] | None) -> WireHeaders | None:
    """A dict of headers as a wire header block (None when empty)."""
    return WireHeaders(fields=tuple(headers.items())) if headers else None


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
        self.headers: Headers = headers_dict(msg.headers)
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
        await self._transport._js_request(self._reply, b"+ACK", None, "ack")
        self._settled = True

    def ack_nowait(self) -> None:
        if self._settled:
            return
        self._transport.core_publish_soon(self._reply, b"+ACK")
        self._settled = True

    def ack_next_soon(self, payload: bytes, reply: str) -> bool:
        """Ack with next (``payload``: ``+NXT`` and a pull request) as :meth:`ack_nowait` sends
        a plain ack, the next delivery to go to ``reply``; False when nothing was sent (settled
        before, or no room in the outgoing buffer: the ack is dropped as ``ack_nowait`` drops
        one, and the request with it)."""
        if self._settled:
            return False
        self._settled = True
        return self._transport.core_publish_soon(self._reply, payload, reply=reply)

    async def nak(self, delay_s: float | None = None) -> None:
        payload = b"-NAK"
        if delay_s is not None and delay_s > 0:
            payload += b" " + json.dumps({"delay": ns(delay_s)}).encode()
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


class Pull:
    """One durable's pull inbox: a wildcard subscription; each fetch asks on its own token, so
    a late end-of-request status of an earlier fetch is told apart from this one's."""

    def __init__(self, sub: Subscription, prefix: str, next_subject: str) -> None:
        self.sub = sub
        self.prefix = prefix
        self.next_subject = next_subject
        self.tokens = itertools.count(1)
        self.taken: deque[Msg] = deque()
        self._body_key: tuple[int, int] | None = None
        self._body = b""

    def request_body(self, batch: int, expires_ns: int) -> bytes:
        """The pull request's JSON (``expires`` left out when not positive); the last one is
        kept, as a consumer asks for the same batch and wait over and over."""
        key = (batch, expires_ns)
        if key != self._body_key:
            body: dict[str, int | bool] = {"batch": batch, "no_wait": True}
            if expires_ns > 0:
                body["expires"] = expires_ns
            self._body = json.dumps(body).encode()
            self._body_key = key
        return self._body

    def hand_out(self, transport: TrioNatsTransport, batch: int) -> list[Delivery]:
        """Up to ``batch`` of the deliveries taken from the inbox, oldest first."""
        out: list[Delivery] = []
        while self.taken and len(out) < batch:
            out.append(TrioNatsDelivery(transport, self.taken.popleft()))
        return out


@final
class CoreMessages:
    """A subscription's messages as :class:`CoreMsg` (an iterator, not an async generator, so
    a consumer that stops early leaves nothing to finalise)."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub

    def __aiter__(self) -> CoreMessages:
        return self

    async def __anext__(self) -> CoreMsg:
        msg = await self._sub.__anext__()
        return CoreMsg(
            subject=msg.subject,
            data=msg.payload,
            headers=headers_dict(msg.headers),
            reply=msg.reply,
        )


@final
class KvEntries:
    """A watch consumer's deliveries as :class:`KvEntry` (delete markers have no value)."""

    def __init__(self, sub: Subscription, bucket: str, prefix: str) -> None:
        self._sub = sub
        self._bucket = bucket
        self._prefix = prefix
        self._strip = len(kv_prefix(bucket))

    def __aiter__(self) -> KvEntries:
        return self

    async def __anext__(self) -> KvEntry:
        while True:
            msg = await self._sub.__anext__()
            if msg.status is not None or msg.reply is None:
                continue  # heartbeats and flow control are not asked for
            key = msg.subject[self._strip :]
            if not key.startswith(self._prefix):
                continue
            headers = headers_dict(msg.headers)
            return KvEntry(
                bucket=self._bucket,
                key=key,
                value=None if is_delete_marker(headers) else msg.payload,
                revision=ack_metadata(msg.reply)[1],
            )
