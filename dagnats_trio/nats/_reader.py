"""Reading one socket into protocol events: the connection's reader task, without the routing.

On a plain TCP socket (:func:`direct_fd`) it waits until the socket is readable and then makes
one non-blocking ``os.read``: cheaper than ``receive_some``, which tries a read first, fails
with EAGAIN when the reply is not there yet, and only then waits. After a full chunk more is
likely waiting, so it reads again before waiting. Any other stream (TLS) is read with
``receive_some``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import trio

from ._defaults import READ_CHUNK_BYTES
from ._dialer import SOCKET_ERRORS
from ._outbox import direct_fd
from ._protocol import ClientProtocol
from ._shell_errors import ConnectionLostError


async def read_events(
    stream: trio.abc.Stream,
    protocol: ClientProtocol,
    dispatch: Callable[[object], None],
    lost: Callable[[BaseException], None],
) -> None:
    """Feed what ``stream`` sends to ``protocol`` and hand every event to ``dispatch``, until
    the stream fails (:class:`ConnectionLostError` when the server closes it); then hand the
    error to ``lost`` (which ends the session) and return. The reader task runs this coroutine
    itself, both loops and the error handling in it: every frame between the reader task and
    Trio's wait is passed through again on every read (a wrapper that caught the errors was one
    more, twice per request round trip)."""
    try:
        # What the handshake read past its INFO, then each read's events: the bytes added and
        # every whole event parsed in one call (``feed``).
        for event in protocol.events():
            dispatch(event)
        feed = protocol.feed
        fd = direct_fd(stream)
        if fd is None:
            while True:
                data = await stream.receive_some(READ_CHUNK_BYTES)
                if not data:
                    raise ConnectionLostError("the server closed the connection")
                for event in feed(data):
                    dispatch(event)
        full = False
        while True:
            if not full:
                await trio.lowlevel.wait_readable(fd)
            try:
                data = os.read(fd, READ_CHUNK_BYTES)
            except BlockingIOError:
                full = False
                continue
            if not data:
                raise ConnectionLostError("the server closed the connection")
            full = len(data) == READ_CHUNK_BYTES
            for event in feed(data):
                dispatch(event)
            if full:
                # A busy socket must not starve the other tasks: a checkpoint per chunk.
                await trio.lowlevel.checkpoint()
    except SOCKET_ERRORS as exc:
        lost(exc)
