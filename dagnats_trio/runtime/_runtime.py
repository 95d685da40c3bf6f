"""The public entry point for embedding: what ``dagnats dev`` runs, in the caller's nursery.

``Runtime(...)`` composes the same :class:`Host` the CLI uses (an embedded nats-server or given
URLs, provisioning, the engine, workers, optionally the REST API) and adds the shared run watch
and a :class:`Client`. Nothing is global: two runtimes in one process are two sets of objects.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import final

import trio

from .._env import DEFAULT_ENV, RuntimeEnv
from .._host import Host, HostConfig, HostInfo, Listen
from ..worker import Handler
from ._client import Client
from ._watch import RunWatch

__all__ = ["Runtime", "RuntimeConfig", "open_runtime"]

#: The runtime's configuration is the host's: one set of fields, one set of checks.
RuntimeConfig = HostConfig


@final
class Runtime:
    """``client = await nursery.start(Runtime(config).run)``, or ``async with open_runtime(...)``.

    Cancel the nursery to stop everything; an embedded nats-server is stopped even then. After
    start, ``info`` says what runs (``api_url``, ``nats_urls``, the worker) and ``client``
    starts runs.
    """

    def __init__(self, config: RuntimeConfig | None = None, *, env: RuntimeEnv = DEFAULT_ENV):
        self.config = config if config is not None else RuntimeConfig(listen=None)
        self.env = env
        self._info: HostInfo | None = None
        self._client: Client | None = None
        self._watch: RunWatch | None = None

    @property
    def info(self) -> HostInfo:
        if self._info is None:
            raise RuntimeError("the runtime has not started: await nursery.start(runtime.run)")
        return self._info

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the runtime has not started: await nursery.start(runtime.run)")
        return self._client

    @property
    def watch(self) -> RunWatch:
        """The one watch every ``result()`` of this runtime waits on."""
        if self._watch is None:
            raise RuntimeError("the runtime has not started: await nursery.start(runtime.run)")
        return self._watch

    async def run(self, *, task_status: trio.TaskStatus[Client] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            info: HostInfo = await nursery.start(Host(self.config, env=self.env).run)
            watch = RunWatch(info.transport, info.service)
            await nursery.start(watch.run)
            self._info = info
            self._watch = watch
            self._client = Client(info.transport, info.service, info.inputs, watch, self.env)
            task_status.started(self._client)


@asynccontextmanager
async def open_runtime(
    handlers: Mapping[str, Handler] | None = None,
    *,
    nats_urls: tuple[str, ...] | list[str] = (),
    data_dir: Path | str | None = None,
    listen: Listen | None = None,
    token: str | None = None,
    config: RuntimeConfig | None = None,
    env: RuntimeEnv = DEFAULT_ENV,
) -> AsyncIterator[Runtime]:
    """A started :class:`Runtime` for the body of the ``async with``; stopped on exit.

    With no ``nats_urls`` an embedded nats-server runs (its store in ``data_dir``, or a
    temporary directory removed at exit). ``handlers`` (task type -> handler) run in a worker;
    ``listen`` serves the REST API. ``config`` gives every other setting (and then the keyword
    arguments must be left out).
    """
    if config is None:
        config = RuntimeConfig(
            nats_urls=tuple(nats_urls),
            data_dir=Path(data_dir) if data_dir is not None else None,
            listen=listen,
            token=token,
            handlers=dict(handlers or {}),
        )
    elif handlers or nats_urls or data_dir is not None or listen is not None or token:
        raise TypeError("open_runtime: give either config= or the keyword settings, not both")
    runtime = Runtime(config, env=env)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        try:
            yield runtime
        finally:
            nursery.cancel_scope.cancel()
