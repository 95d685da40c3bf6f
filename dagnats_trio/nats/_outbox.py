"""The outgoing bytes of one connection: a frame written at once when the connection is quiet,
the frames of a busy connection written together at the end of the scheduler pass, and what
the socket does not take queued for one writer task that sends it with ``send_all``.

Callers never await the socket. On a plain TCP socket on POSIX, :meth:`Outbox.write` makes one
non-blocking ``os.write`` when nothing is queued and the writer is not sending, so bytes keep
their order; whatever the socket does not take is queued whole. A busy connection (its request
mux says so: other requests in flight) instead leaves its frames to the end of the scheduler pass,
where one Trio instrument's ``before_io_wait`` (called once per pass, just before Trio waits
for I/O) writes each socket's frames with one ``os.write``: 50 runs at once queue about ten
frames per pass on a connection, which then cost one system call and one read by the server
instead of ten. The instrument is installed only while some connection is busy (it costs every
pass a call), and a quiet connection never waits for it. While it is installed, a frame nobody
waits on (an ack, queued ``soon``) waits for the end of the pass too, and shares its write
with what its connection queues after it in the pass (the engine's next pull request). Frames
are appended whole and never cut, so a cancelled caller can never leave half a frame on the
wire. The buffer outlives
sockets: what is queued while disconnected goes to the next one. TLS streams (which frame
their own records) always use the writer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Final, Protocol, final

import trio

from ._defaults import MAX_PENDING_BYTES, PENDING_TIMEOUT_S
from ._encoder import PING_BYTES
from ._shell_errors import NatsTimeoutError

#: Bytes left for the end of the pass at most: a pass that queues more writes them at once.
COALESCE_MAX_BYTES: Final = 64 * 1024
#: Passes in a row without a busy connection's frames left for their end before the instrument
#: removes itself.
PASS_END_IDLE_PASSES: Final = 256
#: Requests in flight on a connection from which its frames are written together at the end
#: of the scheduler pass; with fewer, each goes out at once. Four: one agent run at a time has
#: three in flight on a connection once a run (a start's definition read beside its two index
#: publishes, ``engine.index_start``), and the instrument that writes at the end of the pass
#: would then stay installed, costing every pass a call (at three, about 230 Python calls per
#: sequential agent run, ``bench --profile``).
COALESCE_MIN_REQUESTS: Final = 4


class InFlight(Protocol):
    """What tells the outbox how busy its connection is: the request mux."""

    #: Requests waiting for their reply.
    pending: int


def direct_fd(stream: trio.abc.Stream) -> int | None:
    """The file descriptor of ``stream`` when bytes may be written to and read from it
    directly: a plain TCP socket on POSIX (TLS frames its own records); else ``None``."""
    if isinstance(stream, trio.SocketStream) and os.name == "posix":
        return stream.socket.fileno()
    return None


@final
class _PassEnd(trio.abc.Instrument):
    """Writes the outboxes that have frames left for the end of the pass, once per pass.

    ``before_io_wait`` runs after Trio chose how long to wait for I/O, so nothing here wakes a
    task directly (it would sleep through that wait): a write the socket does not take whole
    wakes the writer through the run's token, which interrupts the wait. One per Trio run,
    installed while frames of a busy connection are left to it and removed after
    :data:`PASS_END_IDLE_PASSES` passes without any (the frames that only ride along, acks
    queued ``soon``, do not keep it: watching every pass costs more than their writes save).
    """

    def __init__(self) -> None:
        self.due: list[Outbox] = []
        self.installed = False
        self._idle_passes = 0

    def add(self, outbox: Outbox, *, busy: bool) -> None:
        """Write ``outbox`` at the end of this pass (``busy``: for a busy connection's frames,
        which keep this instrument installed)."""
        self.due.append(outbox)
        if busy:
            self._idle_passes = 0
        if not self.installed:
            trio.lowlevel.add_instrument(self)
            self.installed = True

    def before_io_wait(self, timeout: float) -> None:
        # Never raises: Trio would drop an instrument that did, and its outboxes would wait.
        if self.due:
            due, self.due = self.due, []
            for outbox in due:
                try:
                    outbox.write_now(from_pass_end=True)
                except Exception:  # pragma: no cover - write_now catches what a socket raises
                    with contextlib.suppress(Exception):
                        outbox.wake_writer_soon()
        self._idle_passes += 1
        if self._idle_passes >= PASS_END_IDLE_PASSES:
            self._idle_passes = 0
            self.installed = False
            with contextlib.suppress(KeyError):
                trio.lowlevel.remove_instrument(self)


_PASS_END: trio.lowlevel.RunVar[_PassEnd] = trio.lowlevel.RunVar("dagnats_nats_pass_end")


def _pass_end() -> _PassEnd:
    """This run's :class:`_PassEnd`."""
    try:
        return _PASS_END.get()
    except LookupError:
        pass_end = _PassEnd()
        _PASS_END.set(pass_end)
        return pass_end


@final
class Outbox:
    """One connection's outgoing buffer and its writer. ``in_flight`` (the connection's
    request mux) says whether the connection is busy (:data:`COALESCE_MIN_REQUESTS`), read by
    :meth:`write` itself: no frame of the connection's around every write."""

    def __init__(self, in_flight: InFlight) -> None:
        self._in_flight = in_flight
        self._out = bytearray()
        self._ready = trio.Event()
        self._room = trio.Event()
        self._fd: int | None = None
        self._writing = False
        self._due = False
        self._pings_queued = 0
        self._writes = 0
        self._pass_end: _PassEnd | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes queued and not yet handed to the socket."""
        return len(self._out)

    @property
    def pings_queued(self) -> int:
        """PINGs in the buffer (not yet on a socket): they will reach the next server."""
        return self._pings_queued

    @property
    def writes(self) -> int:
        """Writes to sockets so far (one ``os.write`` or ``send_all`` each)."""
        return self._writes

    def attach(self, stream: trio.abc.Stream, first: bytes) -> None:
        """A new socket: ``first`` (the resubscriptions) goes out before anything queued.
        Direct writes only on a plain TCP socket on POSIX (TLS frames its own records)."""
        self._fd = direct_fd(stream)
        if self._fd is not None and self._pass_end is None:
            self._pass_end = _pass_end()
            self._token = trio.lowlevel.current_trio_token()
        self._out = bytearray(first) + self._out
        self._ready.set()

    def has_room(self, size: int) -> bool:
        """Whether ``size`` more bytes may be queued now (an empty buffer takes any frame)."""
        return len(self._out) + size <= MAX_PENDING_BYTES or not self._out

    def detach(self) -> None:
        """The socket is gone: queue everything until the next one."""
        self._fd = None

    def write(self, data: bytes, *, soon: bool = False, if_room: bool = False) -> bool:
        """Queue ``data`` whole and return True; with ``if_room``, only if :meth:`has_room`
        says it fits (False, nothing queued, when not): the test made in this call, for a
        request or a ``try_publish``, where a call of :meth:`has_room` was one more per frame.
        On a plain socket with nothing queued and the writer idle it goes out now, or, when the
        connection is busy (:data:`COALESCE_MIN_REQUESTS` requests in flight), at the end of
        this scheduler pass with the other frames of the pass (at once past
        :data:`COALESCE_MAX_BYTES`); what the socket does not take goes to the writer. A frame
        nobody waits on (an ack) may go ``soon``: at the end of the pass too while the end of
        the pass is watched anyway (some connection was busy lately), so it shares a write
        with the frames queued after it in the pass; at once otherwise (watching the end of
        every pass for it would cost more than the write it saves)."""
        out = self._out
        was_empty = not out  # (no call: what ``len(out) == len(data)`` after told, with one)
        if if_room and not was_empty and len(out) + len(data) > MAX_PENDING_BYTES:
            return False  # not has_room(len(data))
        out += data
        if self._fd is None or self._writing:
            self._ready.set()
        elif self._due:
            if len(out) >= COALESCE_MAX_BYTES:
                self.write_now()
        elif (busy := self._in_flight.pending >= COALESCE_MIN_REQUESTS) or (
            soon and self._pass_end is not None and self._pass_end.installed
        ):
            self._due = True
            assert self._pass_end is not None
            self._pass_end.add(self, busy=busy)
        elif was_empty:
            self.write_now()
        else:
            self._ready.set()
        return True

    def write_ping(self) -> None:
        """A PING; counted while it sits in the buffer (see :attr:`pings_queued`)."""
        self._pings_queued += 1  # before: a write that goes out at once zeroes it
        self.write(PING_BYTES)

    def write_now(self, *, from_pass_end: bool = False) -> None:
        """Write what is queued with one non-blocking ``os.write`` if the socket is attached
        and the writer idle; what the socket does not take is left to the writer (woken
        through the run's token from the end of a pass, where a task cannot be woken)."""
        self._due = False
        fd = self._fd
        if fd is None or self._writing or not self._out:
            return
        data = self._out
        try:
            written = os.write(fd, data)
        except OSError:  # full (BlockingIOError) or broken: the writer and reader cope
            written = 0
        self._writes += 1
        if written == len(data):
            self._out = bytearray()
            self._pings_queued = 0
            return
        del data[:written]
        if from_pass_end:
            self.wake_writer_soon()
        else:
            self._ready.set()

    def wake_writer_soon(self) -> None:
        """Wake the writer from outside any task (the end of a pass)."""
        if self._token is not None:
            self._token.run_sync_soon(self._wake_writer)

    def _wake_writer(self) -> None:
        self._ready.set()

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
                self._writes += 1
                try:
                    await stream.send_all(data)
                finally:
                    self._writing = False

    def close(self) -> None:
        """Write what is left for the end of the pass if the socket is still there, and wake
        publishers waiting for room (they then see the connection closed)."""
        self.write_now()
        self._room.set()
