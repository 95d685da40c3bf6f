"""Serving the REST app with hypercorn on Trio, as a part started with ``nursery.start``.

hypercorn reports the addresses it bound (from the listening sockets themselves), so port 0
works: ``await nursery.start(server.run)`` returns the real URL.
"""

from __future__ import annotations

import logging

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.types import ASGIApp

from .._defaults import DEFAULT_LISTEN_BACKLOG, check_backlog

log = logging.getLogger(__name__)
#: Hypercorn's own messages: warnings and errors only (its "Running on ..." at INFO would say the
#: address a second time, beside ours, which has the real port).
hypercorn_log = logging.getLogger(f"{__name__}.hypercorn")
hypercorn_log.setLevel(logging.WARNING)

#: How long open requests (a journal follower, an input long poll) may run on after shutdown
#: begins before they are cancelled.
SHUTDOWN_GRACE_S = 2.0
#: Seconds an idle keep-alive connection stays open.
KEEP_ALIVE_TIMEOUT_S = 30.0


class ApiServer:
    """``url`` is set once :meth:`run` has started; :meth:`shutdown` stops it gracefully
    (cancelling the surrounding nursery stops it at once)."""

    def __init__(
        self,
        app: ASGIApp,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        backlog: int = DEFAULT_LISTEN_BACKLOG,
    ) -> None:
        check_backlog(backlog)
        self.app = app
        self.host = host
        self.port = port
        self.backlog = backlog
        self.url: str | None = None
        self._shutdown = trio.Event()

    def shutdown(self) -> None:
        self._shutdown.set()

    async def run(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        config = Config()
        host = f"[{self.host}]" if ":" in self.host else self.host
        config.bind = [f"{host}:{self.port}"]
        config.graceful_timeout = SHUTDOWN_GRACE_S
        config.keep_alive_timeout = KEEP_ALIVE_TIMEOUT_S
        config.backlog = self.backlog
        config.accesslog = None
        config.errorlog = hypercorn_log
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(self._serve, config)
            if not binds:
                raise RuntimeError(f"hypercorn bound no address for {config.bind}")
            self.url = binds[0]
            log.info("REST API listening on %s", self.url)
            task_status.started(self.url)

    async def _serve(
        self, config: Config, *, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
    ) -> None:
        await serve(
            self.app,  # type: ignore[arg-type]
            config,
            shutdown_trigger=self._shutdown.wait,
            task_status=task_status,
        )
