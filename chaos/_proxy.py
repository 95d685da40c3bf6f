"""A loopback TCP proxy the chaos soak controls: the network between nats-servers (and between
the clients and a server) that a partition cuts.

A cut is a network that stops carrying packets, not one that resets connections: bytes stop
flowing both ways on the links it holds (each side sees silence, its peer neither answers nor
hangs up, as when a cable is pulled) and a new connection is accepted but carries nothing. When
the cut heals, held bytes flow on and held connections go through to their target: to either
side it was a long delay, as TCP makes a partition that heals look. The side that notices first
is whichever gives up on silence first (a Raft election timeout, a client's ping).

``cut(existing=False)`` holds new connections only and leaves links already up alone: clients
of a cut-off node stay connected to it (the cut-off side), clients elsewhere cannot reach it.
``hold_answers()`` holds only what the target sends back: a request reaches the server and is
acted on, its answer does not come back until the heal (a publish stored whose ack is lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import final

import trio

log = logging.getLogger("chaos")

LOOPBACK = "127.0.0.1"
#: Bytes read at once on one direction of a link.
PROXY_READ_BYTES = 65536
#: Bound on dialling the target of a new link.
PROXY_DIAL_TIMEOUT_S = 5.0


@final
class TcpProxy:
    """Listens on a free loopback port (:attr:`port`) and forwards each connection to
    ``target()`` (a callable: a restarted server may come back on another port)."""

    def __init__(self, name: str, target: Callable[[], int]) -> None:
        self.name = name
        self._target = target
        self._port: int | None = None
        #: Set while bytes flow towards the target, and back from it, on links already up.
        self._links_flowing = trio.Event()
        self._links_flowing.set()
        self._answers_flowing = trio.Event()
        self._answers_flowing.set()
        #: Set while new connections go through.
        self._dials_flowing = trio.Event()
        self._dials_flowing.set()
        #: Links up now (both directions being forwarded).
        self.live = 0
        self.accepted = 0

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError(f"proxy {self.name} is not listening yet")
        return self._port

    @property
    def is_cut(self) -> bool:
        return not self._dials_flowing.is_set()

    def cut(self, *, existing: bool = True) -> None:
        """Hold new connections, and (``existing``) the bytes of links already up."""
        if self._dials_flowing.is_set():
            self._dials_flowing = trio.Event()
        if existing and self._links_flowing.is_set():
            self._links_flowing = trio.Event()
        if existing:
            self.hold_answers()

    def hold_answers(self) -> None:
        """Hold the bytes the target sends back, on every link (new ones too)."""
        if self._answers_flowing.is_set():
            self._answers_flowing = trio.Event()

    def heal(self) -> None:
        """Let everything held go on."""
        self._dials_flowing.set()
        self._links_flowing.set()
        self._answers_flowing.set()

    async def run(
        self, *, task_status: trio.TaskStatus[TcpProxy] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Serve until cancelled: ``proxy = await nursery.start(TcpProxy(...).run)``."""
        listeners = await trio.open_tcp_listeners(0, host=LOOPBACK)
        sockname = listeners[0].socket.getsockname()
        self._port = int(sockname[1])
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(self._link, listeners, handler_nursery=nursery)

    async def _link(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        async with client:
            await self._dials_flowing.wait()
            try:
                with trio.fail_after(PROXY_DIAL_TIMEOUT_S):
                    upstream = await trio.open_tcp_stream(LOOPBACK, self._target())
            except (OSError, trio.TooSlowError) as exc:
                log.debug("proxy %s: target unreachable: %s", self.name, exc)
                return
            async with upstream:
                self.live += 1
                try:
                    async with trio.open_nursery() as nursery:
                        link = nursery.cancel_scope
                        nursery.start_soon(self._pump, client, upstream, link, False)
                        nursery.start_soon(self._pump, upstream, client, link, True)
                finally:
                    self.live -= 1

    async def _pump(
        self,
        src: trio.SocketStream,
        dst: trio.SocketStream,
        link: trio.CancelScope,
        answers: bool,
    ) -> None:
        """One direction of a link (``answers``: from the target back to the client); when
        either side ends, the whole link ends."""
        try:
            while True:
                data = await src.receive_some(PROXY_READ_BYTES)
                if not data:
                    return
                await self._links_flowing.wait()
                if answers:
                    await self._answers_flowing.wait()
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            link.cancel()
