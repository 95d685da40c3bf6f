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
from typing import NoReturn

import trio

from ._defaults import READ_CHUNK_BYTES
from ._outbox import direct_fd
from ._protocol import ClientProtocol
from ._shell_errors import ConnectionLostError


async def read_events(
    stream: trio.abc.Stream, protocol: ClientProtocol, dispatch: Callable[[object], None]
) -> NoReturn:
    """Feed what ``stream`` sends to ``protocol`` and hand every event to ``dispatch``, until
    the stream fails (:class:`ConnectionLostError` when the server closes it). Both loops live
    in this one coroutine: every frame between the reader task and Trio's wait is passed
    through again on every read."""
    fd = direct_fd(stream)
    if fd is None:
        while True:
            for event in protocol.events():
                dispatch(event)
            data = await stream.receive_some(READ_CHUNK_BYTES)
            if not data:
                raise ConnectionLostError("the server closed the connection")
            protocol.receive_data(data)
    full = False
    while True:
        for event in protocol.events():
            dispatch(event)
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
        protocol.receive_data(data)
        if full:
            # A busy socket must not starve the other tasks: a checkpoint per chunk.
            await trio.lowlevel.checkpoint()
