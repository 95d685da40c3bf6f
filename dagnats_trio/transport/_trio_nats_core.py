"""The native transport's core NATS operations and its KV watch: publishes, subscriptions, plain
requests and the ping, and a watch (an ephemeral push consumer delivering to an inbox of its
own, so a core subscription too).

A base class of :class:`~dagnats_trio.transport.TrioNatsTransport`, which supplies what is
declared here: its connection, request timeout and round-trip count, its open check and its
requests. Methods, not functions the transport wraps: a publish or an ack goes through no more
frames than when they were defined on the transport itself.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any

import trio

from ..nats import Connection, NatsError, ProtocolError
from ._errors import TemporarilyUnavailable, TransportError
from ._jetstream_wire import json_error, kv_stream, ns, watch_filter
from ._trio_nats_msgs import CoreMessages, KvEntries, map_error, wire_headers
from ._values import DEFAULT_REQUEST_TIMEOUT_S, CoreMsg, Headers, KvEntry

#: Bound on cleanup (deleting a watch consumer, closing) run shielded.
CLOSE_TIMEOUT_S = 5.0
#: Entries a KV watch buffers before the newest are dropped (the reader never blocks).
WATCH_BUFFER_ENTRIES = 4096
#: A watch's ephemeral consumer is removed by the server this long after its client went away.
WATCH_INACTIVE_THRESHOLD_S = 60.0


class TrioNatsCore(ABC):
    """Core NATS and the KV watch on the transport's connection (see the module's docstring)."""

    _conn: Connection
    _timeout_s: float
    _round_trips: int

    @abstractmethod
    def _check_open(self, what: str) -> None:
        """Raise :class:`Closed` once the transport is closed."""

    @abstractmethod
    async def _js_request(
        self,
        subject: str,
        payload: bytes,
        headers: Mapping[str, str] | None,
        what: str,
        timeout_s: float | None = None,
    ) -> bytes: ...

    @abstractmethod
    async def _api(self, subject: str, body: Mapping[str, Any], what: str) -> dict[str, Any]: ...

    # --- key-value -----------------------------------------------------------------------------

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        """An ephemeral push consumer (deliver new, no acks) on an inbox of our own."""
        stream = kv_stream(bucket)
        what = f"watch {bucket!r}"
        self._check_open(what)
        inbox = self._conn.new_inbox()
        async with self._conn.subscribe(inbox, max_buffered_msgs=WATCH_BUFFER_ENTRIES) as sub:
            config = {
                "deliver_subject": inbox,
                "filter_subject": watch_filter(bucket, prefix),
                "deliver_policy": "new",
                "ack_policy": "none",
                "max_deliver": 1,
                "mem_storage": True,
                "num_replicas": 1,
                "inactive_threshold": ns(WATCH_INACTIVE_THRESHOLD_S),
            }
            answer = await self._api(
                f"$JS.API.CONSUMER.CREATE.{stream}",
                {"stream_name": stream, "config": config},
                what,
            )
            name = answer["name"]

            try:
                yield KvEntries(sub, bucket, prefix)
            finally:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(CLOSE_TIMEOUT_S),
                    suppress(TransportError),
                ):
                    await self._api(f"$JS.API.CONSUMER.DELETE.{stream}.{name}", {}, what)

    # --- core NATS -----------------------------------------------------------------------------

    async def core_publish(self, subject: str, data: bytes, headers: Headers | None = None) -> None:
        what = f"publish {subject!r}"
        self._check_open(what)
        try:
            await self._conn.publish(subject, data, headers=wire_headers(headers))
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, what) from None

    def core_publish_soon(self, subject: str, data: bytes, *, reply: str | None = None) -> bool:
        """Queue a core publish and return at once, no scheduler pass (``ack_nowait``, an ack
        with next): it goes out at once, or on busy connections at the end of this scheduler
        pass with the frames queued after it (``try_publish(soon=True)``). Dropped (False) when
        the outgoing buffer is full (a message whose loss is harmless; waiting for room is what
        :meth:`core_publish` does)."""
        what = f"publish {subject!r}"
        self._check_open(what)
        try:
            return self._conn.try_publish(subject, data, reply=reply, soon=True)
        except (NatsError, ProtocolError) as exc:
            raise map_error(exc, what) from None

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
                raise map_error(exc, what) from None

            yield CoreMessages(sub)

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
        return await self._js_request(subject, data, headers, f"request {subject!r}", timeout_s)

    async def ping(self, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> None:
        what = "ping"
        self._check_open(what)
        if not self._conn.stats().connected:
            await trio.lowlevel.checkpoint()
            raise TemporarilyUnavailable(f"{what}: not connected to NATS")
        answer = await self._js_request("$JS.API.INFO", b"", None, what, timeout_s)
        err = json.loads(answer).get("error")
        if err is not None:
            raise json_error(err, what)
