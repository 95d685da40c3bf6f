"""Just enough of the NATS client protocol, over a Trio socket, to tell that a server answers.

Readiness checks live below the transport (the server package must not pull in asyncio), and a
readiness check needs only "INFO arrives" and "one JetStream API request gets a reply".
"""

from __future__ import annotations

import json
from typing import Any

import trio

from ._binary import NatsServerError
from ._config import LOOPBACK

#: Bytes read per receive while waiting for a protocol line.
_RECEIVE_CHUNK_BYTES = 65536
_INBOX = "_INBOX.dagnats_probe"


class _Reader:
    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buf = bytearray()

    async def line(self) -> bytes:
        while True:
            end = self._buf.find(b"\r\n")
            if end >= 0:
                out = bytes(self._buf[:end])
                del self._buf[: end + 2]
                return out
            await self._fill()

    async def exactly(self, n: int) -> bytes:
        while len(self._buf) < n + 2:
            await self._fill()
        out = bytes(self._buf[:n])
        del self._buf[: n + 2]
        return out

    async def _fill(self) -> None:
        chunk = await self._stream.receive_some(_RECEIVE_CHUNK_BYTES)
        if not chunk:
            raise NatsServerError("nats-server closed the connection")
        self._buf += chunk


async def answers_info(port: int) -> bool:
    """True when a server on ``port`` accepts a connection and sends its INFO line."""
    try:
        stream = await trio.open_tcp_stream(LOOPBACK, port)
    except OSError:
        return False
    async with stream:
        try:
            line = await _Reader(stream).line()
        except (OSError, trio.BrokenResourceError, NatsServerError):
            return False
        return line.startswith(b"INFO ")


async def api_request(port: int, subject: str, payload: dict[str, Any]) -> dict[str, Any]:
    """One request/reply on a fresh connection; the caller bounds it with a deadline."""
    stream = await trio.open_tcp_stream(LOOPBACK, port)
    async with stream:
        reader = _Reader(stream)
        info = await reader.line()
        if not info.startswith(b"INFO "):
            raise NatsServerError(f"unexpected greeting from nats-server: {info[:80]!r}")
        body = json.dumps(payload).encode()
        connect = json.dumps({"verbose": False, "pedantic": False, "name": "dagnats-probe"})
        await stream.send_all(
            f"CONNECT {connect}\r\nSUB {_INBOX} 1\r\n".encode()
            + f"PUB {subject} {_INBOX} {len(body)}\r\n".encode()
            + body
            + b"\r\n"
        )
        while True:
            line = await reader.line()
            if line == b"PING":
                await stream.send_all(b"PONG\r\n")
            elif line.startswith(b"-ERR"):
                raise NatsServerError(f"nats-server refused the probe: {line.decode()}")
            elif line.startswith(b"MSG "):
                size = int(line.split()[-1])
                data = await reader.exactly(size)
                if not data:
                    # An empty reply with a status header would be HMSG; an empty MSG is odd.
                    raise NatsServerError(f"empty reply to {subject}")
                answer: dict[str, Any] = json.loads(data)
                return answer
            elif line.startswith(b"HMSG "):
                parts = line.split()
                size = int(parts[-1])
                data = await reader.exactly(size)
                raise NatsServerError(f"no answer to {subject}: {data[:80]!r}")
