"""The CPU floor: what one request/response round trip costs this process at the least.

A run's CPU (``time.process_time`` over the agent's runs) holds two parts: what any Trio
program pays to send a request to the nats-server and read its answer (a socket write, a wait
in epoll, a socket read, Trio's scheduling of the one task that waits), and what this runtime
adds on top (the NATS client's parser and mux, JetStream logic, codec, engine, journal, worker).
The floor measures the first part alone, so the bench can print how many floors a run's CPU is.

The client here is the least a Trio program can be: one task, one TCP stream, no reader task,
no parser beyond finding the end of one ``MSG`` frame, no headers, no JetStream code of ours. It
sends a raw ``PUB`` with a reply subject to a JetStream stream's subject (the server stores the
message and answers with its ack, as most of a run's round trips are answered) and reads the
answer, one at a time. Only the handshake (CONNECT, SUB) uses the NATS client's encoder; it is
not measured.

``CPU floor per run`` = the CPU of one such round trip x the round trips the run counted
(measured in the same run). The ratio of a run's CPU to it says how much of the CPU is ours: 1.0
would be a runtime that costs nothing but the round trips it needs.
"""

from __future__ import annotations

import time
from typing import Final
from urllib.parse import urlsplit

import trio

from dagnats_trio.nats import Connect, Ping, Sub, encode

#: Round trips measured (CPU, not wall time: a count long enough that the process clock's
#: resolution and one preemption do not matter), after the warm-up ones.
CPU_FLOOR_ROUND_TRIPS: Final = 2000
CPU_FLOOR_WARMUP_ROUND_TRIPS: Final = 100
#: Bound on the whole measurement; a server that does not answer is a failure, not a figure.
CPU_FLOOR_TIMEOUT_S: Final = 60.0
#: Bytes asked of the socket per read (an answer is a few dozen).
CPU_FLOOR_READ_BYTES: Final = 65536
#: The reply subject and its subscription id.
_INBOX: Final = b"_INBOX.bench-cpu-floor"
_SID: Final = "1"
_CRLF: Final = b"\r\n"
_PONG: Final = b"PONG\r\n"


class _Answers:
    """Reads whole ``MSG`` frames off the stream: the least framing a reply needs."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream
        self._buf = bytearray()

    async def _more(self) -> None:
        data = await self._stream.receive_some(CPU_FLOOR_READ_BYTES)
        if not data:
            raise RuntimeError("cpu floor: the server closed the connection")
        self._buf += data

    async def line(self) -> bytes:
        """The next control line (INFO, PONG, +OK, -ERR, or a MSG's head), without its CRLF."""
        while (end := self._buf.find(_CRLF)) < 0:
            await self._more()
        line = bytes(self._buf[:end])
        del self._buf[: end + 2]
        return line

    async def reply(self) -> None:
        """Wait for one ``MSG`` on the inbox and drop it (its payload is the stream's ack). An
        INFO the server sends of its own (after CONNECT, on a cluster change) is skipped and
        its PING answered, as any client must."""
        while not (head := await self.line()).startswith(b"MSG "):
            if head == b"PING":
                await self._stream.send_all(_PONG)
            elif not head.startswith(b"INFO "):
                raise RuntimeError(f"cpu floor: expected MSG, got {head[:200]!r}")
        size = int(head.rsplit(b" ", 1)[1])
        while len(self._buf) < size + 2:
            await self._more()
        del self._buf[: size + 2]


async def cpu_per_round_trip_us(
    url: str,
    subject: str,
    body: bytes,
    *,
    round_trips: int = CPU_FLOOR_ROUND_TRIPS,
    warmup: int = CPU_FLOOR_WARMUP_ROUND_TRIPS,
) -> float:
    """This process's CPU (µs) per raw request/response round trip: a ``PUB`` of ``body`` on
    ``subject`` (a JetStream stream's subject, so the server answers with its ack) with a reply
    subject, and the reading of that answer; ``round_trips`` of them one after another, after
    ``warmup`` unmeasured."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 4222
    pub = b"PUB %s %s %d\r\n%s\r\n" % (subject.encode(), _INBOX, len(body), body)
    with trio.fail_after(CPU_FLOOR_TIMEOUT_S):
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            answers = _Answers(stream)
            info = await answers.line()
            if not info.startswith(b"INFO "):
                raise RuntimeError(f"cpu floor: expected INFO, got {info[:200]!r}")
            connect = Connect(name="bench-cpu-floor", headers=False, no_responders=False)
            await stream.send_all(
                encode(connect) + encode(Sub(_INBOX.decode(), _SID)) + encode(Ping())
            )
            pong = await answers.line()
            if pong != b"PONG":
                raise RuntimeError(f"cpu floor: expected PONG, got {pong[:200]!r}")
            for _ in range(warmup):
                await stream.send_all(pub)
                await answers.reply()
            cpu0 = time.process_time()
            for _ in range(round_trips):
                await stream.send_all(pub)
                await answers.reply()
            return (time.process_time() - cpu0) * 1e6 / round_trips


def cpu_floor_line(cpu_ms: float, floor_us: float, round_trips: float) -> tuple[str, float]:
    """The line the bench prints, and the ratio: a run's CPU against the floor per run (the CPU
    of one raw round trip times the round trips the run counted)."""
    floor_ms = floor_us * round_trips / 1000
    ratio = cpu_ms / floor_ms if floor_ms > 0 else float("inf")
    return (
        f"CPU floor per run {floor_ms:.2f} ms (a raw Trio round trip, {floor_us:.1f} us of CPU, "
        f"x {round_trips:.1f} round trips): CPU per run {cpu_ms:.2f} ms = {ratio:.1f}x the floor",
        ratio,
    )
