"""The outgoing bytes of one connection: written at once when the socket takes them, else queued
for one writer task that sends everything queued in one ``send_all``.

Callers never await the socket. :meth:`Outbox.write` makes one non-blocking ``os.write`` when
nothing is queued and the writer is not sending, so bytes keep their order; whatever the socket
does not take is queued whole. It never waits, so a cancelled caller can never leave half a frame
on the wire. The buffer outlives sockets: what is queued while disconnected goes to the next one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import final

import trio

from ._defaults import MAX_PENDING_BYTES, PENDING_TIMEOUT_S
from ._encoder import PING_BYTES
from ._shell_errors import NatsTimeoutError


def direct_fd(stream: trio.abc.Stream) -> int | None:
    """The file descriptor of ``stream`` when bytes may be written to and read from it
    directly: a plain TCP socket on POSIX (TLS frames its own records); else ``None``."""
    if isinstance(stream, trio.SocketStream) and os.name == "posix":
        return stream.socket.fileno()
    return None


@final
class Outbox:
    """One connection's outgoing buffer and its writer."""

    def __init__(self) -> None:
        self._out = bytearray()
        self._ready = trio.Event()
        self._room = trio.Event()
        self._fd: int | None = None
        self._writing = False
        self._pings_queued = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet handed to the socket."""
        return len(self._out)

    @property
    def pings_queued(self) -> int:
        """PINGs in the buffer (not yet on a socket): they will reach the next server."""
        return self._pings_queued

    def attach(self, stream: trio.abc.Stream, first: bytes) -> None:
        """A new socket: ``first`` (the resubscriptions) goes out before anything queued.
        Direct writes only on a plain TCP socket on POSIX (TLS frames its own records)."""
        self._fd = direct_fd(stream)
        self._out = bytearray(first) + self._out
        self._ready.set()

    def has_room(self, size: int) -> bool:
        """Whether ``size`` more bytes may be queued now (an empty buffer takes any frame)."""
        return len(self._out) + size <= MAX_PENDING_BYTES or not self._out

    def detach(self) -> None:
        """The socket is gone: queue everything until the next one."""
        self._fd = None

    def write(self, data: bytes) -> bool:
        """Send ``data`` now if the socket takes it without waiting, else queue it for the
        writer; True when (some of) it was queued."""
        if self._fd is not None and not self._out and not self._writing:
            try:
                written = os.write(self._fd, data)
            except OSError:  # full (BlockingIOError) or broken: the writer and reader cope
                written = 0
            if written == len(data):
                return False
            data = data[written:]
        self._out += data
        self._ready.set()
        return True

    def write_ping(self) -> None:
        """A PING; counted while it sits in the buffer (see :attr:`pings_queued`)."""
        if self.write(PING_BYTES):
            self._pings_queued += 1

    async def wait_for_room(self, size: int, check_open: Callable[[], None]) -> None:
        """Wait until ``size`` more bytes fit under :data:`MAX_PENDING_BYTES` (an empty buffer
        always takes one frame); :class:`NatsTimeoutError` after :data:`PENDING_TIMEOUT_S`.
        ``check_open`` raises once the connection is closed."""
        if self.has_room(size):
            return
        with trio.move_on_after(PENDING_TIMEOUT_S):
            while len(self._out) + size > MAX_PENDING_BYTES and self._out:
                check_open()
                await self._room.wait()
            return
        raise NatsTimeoutError(
            f"publish: {len(self._out)} bytes queued for {PENDING_TIMEOUT_S} s (disconnected?)"
        )

    async def run_writer(self, stream: trio.abc.Stream) -> None:
        """The writer task of one socket: send whatever is queued, all of it at once."""
        while True:
            await self._ready.wait()
            self._ready = trio.Event()
            data, self._out = self._out, bytearray()
            self._pings_queued = 0
            self._room.set()
            self._room = trio.Event()
            if data:
                self._writing = True
                try:
                    await stream.send_all(data)
                finally:
                    self._writing = False

    def close(self) -> None:
        """Wake publishers waiting for room (they then see the connection closed)."""
        self._room.set()
