"""Composing the parts of a process in one Trio nursery.

``dagnats dev``, ``serve``, ``worker`` and ``demo`` all host some subset of: an embedded
nats-server (or given URLs), a transport, provisioning, the engine, the REST API, the NATS inputs
endpoints and workers. Writing that composition once keeps the order of start-up (server before
transport, provisioning before anything that makes consumers, the engine before the API accepts
runs) and the wiring of the inputs service into the engine and the workers in one place, so an
embedding service gets the same process ``dagnats dev`` runs with ``await nursery.start(host.run)``.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, final

import attrs
import trio

from ._defaults import DEFAULT_LISTEN_BACKLOG, DEFAULT_LISTEN_HOST, DEFAULT_LISTEN_PORT
from ._env import DEFAULT_ENV, RuntimeEnv
from .api import Service
from .api.rest import create_app
from .api.server import ApiServer, check_backlog
from .bridge import Bridge
from .engine import Engine, ensure_run_index
from .inputs import InputsEndpoints, InputsService
from .journal import (
    DEFAULT_RESTART_LIMIT,
    MAX_RESTART_LIMIT,
    MIN_RESTART_LIMIT,
    check_restart_limit,
)
from .protocol import is_ascii_digits, parse_decimal
from .server import NatsServer
from .transport import (
    DEFAULT_CLIENT,
    Client,
    TemporarilyUnavailable,
    Transport,
    TransportTimeout,
    open_nats_transport,
    parse_client,
    provision,
)
from .worker import DEFAULT_ACK_WAIT_S, Handler, Worker

#: The embedded server picks a free client port when none is asked for.
ANY_NATS_PORT = -1
#: Longest the parts of a host may take to start (server, connect, provision, engine, API).
HOST_START_TIMEOUT_S = 30.0
#: Pause between provisioning attempts while a fresh cluster elects its meta leader.
PROVISION_RETRY_INTERVAL_S = 0.5
#: Highest replica count JetStream accepts for a stream.
MAX_REPLICAS = 5

log = logging.getLogger(__name__)

__all__ = [
    "ANY_NATS_PORT",
    "DEFAULT_LISTEN_HOST",
    "DEFAULT_LISTEN_PORT",
    "HOST_START_TIMEOUT_S",
    "MAX_REPLICAS",
    "Host",
    "HostConfig",
    "HostInfo",
    "HostSetupError",
    "Listen",
    "ModuleImportFailed",
    "load_handlers",
    "merge_handlers",
    "parse_listen",
    "parse_nats_urls",
    "parse_restart_limit",
]


class HostSetupError(ValueError):
    """A setting of the host is unusable (a bad address, a module that does not load)."""


#: Where the importer's own frames come from (left out of a user module's traceback).
_IMPORTLIB_DIR = os.path.dirname(importlib.__file__ or "") + os.sep


@final
class ModuleImportFailed(HostSetupError):
    """The user's module raised while it was imported: one line, and ``module_traceback``
    holds the frames of the module's own code (not the importer's or the CLI's)."""

    def __init__(self, module_name: str, spec: str, exc: BaseException) -> None:
        super().__init__(
            f"importing {module_name!r} for {spec!r} failed: {type(exc).__name__}: {exc}"
        )
        frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if not f.filename.startswith("<frozen ")
            and f.filename != __file__
            and not f.filename.startswith(_IMPORTLIB_DIR)
        ]
        lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
        lines += traceback.format_exception_only(type(exc), exc)
        self.module_traceback = "".join(lines)


@final
@attrs.frozen
class Listen:
    """An address for the REST API; port 0 picks a free one."""

    host: str = DEFAULT_LISTEN_HOST
    port: int = DEFAULT_LISTEN_PORT

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (loopback)."""
    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not is_ascii_digits(port_text):
        raise HostSetupError(f"listen address {text!r} must look like 127.0.0.1:8080")
    try:
        port = parse_decimal(port_text, low=0, high=65535)
    except ValueError:
        raise HostSetupError(f"listen port {port_text} is not from 0 to 65535") from None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Listen(host or DEFAULT_LISTEN_HOST, port)


def parse_nats_urls(text: str) -> tuple[str, ...]:
    """``URL[,URL...]``; a bare ``host:port`` gets the ``nats://`` scheme."""
    urls = []
    for part in text.split(","):
        url = part.strip()
        if not url:
            continue
        if "://" not in url:
            url = f"nats://{url}"
        scheme = url.split("://", 1)[0]
        if scheme not in ("nats", "tls", "ws", "wss"):
            raise HostSetupError(f"NATS URL {part.strip()!r} must start with nats:// or tls://")
        urls.append(url)
    if not urls:
        raise HostSetupError("no NATS URL given (--nats or DAGNATS_NATS_URL)")
    return tuple(urls)


#: What ``--restart-limit`` accepts before its range is checked: ASCII digits (``int()`` would
#: also take ``"1_0"`` and other scripts' digits).
_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")


def parse_nats_client(text: str) -> Client:
    """``--client`` / ``DAGNATS_CLIENT``: ``native`` or ``nats-py``."""
    try:
        return parse_client(text)
    except ValueError as exc:
        raise HostSetupError(str(exc)) from None


def parse_restart_limit(text: str) -> int:
    """``--restart-limit`` / ``DAGNATS_RESTART_LIMIT``: a whole number from 1 to 1000."""
    raw = text.strip()
    if _WHOLE_NUMBER.fullmatch(raw) is None:
        raise HostSetupError(
            f"restart_limit must be a whole number from {MIN_RESTART_LIMIT} to "
            f"{MAX_RESTART_LIMIT}, got {text!r}"
        )
    return _checked_restart_limit(int(raw))


def _checked_restart_limit(value: int) -> int:
    try:
        return check_restart_limit(value)
    except ValueError as exc:
        raise HostSetupError(str(exc)) from None


def import_spec(spec: str, example: str) -> Any:
    """The object ``module:attr[.attr...]`` names (raises :class:`HostSetupError`, one line).

    The current directory is importable, as it is for ``python -m``, so ``myagent:handlers``
    finds ``./myagent.py`` when the command runs from a console script.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise HostSetupError(f"{spec!r} must be module:attribute, e.g. {example}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise HostSetupError(f"cannot import {module_name!r} for {spec!r}: {exc}") from None
        raise ModuleImportFailed(module_name, spec, exc) from None
    except Exception as exc:
        raise ModuleImportFailed(module_name, spec, exc) from None
    value: Any = module
    for name in attr.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            raise HostSetupError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value


def load_handlers(spec: str) -> Mapping[str, Handler]:
    """``module:attr`` names a ``Mapping[str, Handler]`` (task type -> async handler)."""
    value = import_spec(spec, "myagent:handlers")
    if not isinstance(value, Mapping):
        raise HostSetupError(
            f"{spec} must be a mapping of task type to handler, got {type(value).__name__}"
        )
    out: dict[str, Handler] = {}
    for task_type, handler in value.items():
        if not isinstance(task_type, str) or not callable(handler):
            raise HostSetupError(f"{spec}: {task_type!r} must map a task type to a callable")
        out[task_type] = handler
    if not out:
        raise HostSetupError(f"{spec} has no handlers")
    return out


def merge_handlers(specs: list[Mapping[str, Handler]]) -> dict[str, Handler]:
    """One mapping from several modules; a task type named twice is a mistake, not an override."""
    merged: dict[str, Handler] = {}
    for handlers in specs:
        for task_type, handler in handlers.items():
            if task_type in merged and merged[task_type] is not handler:
                raise HostSetupError(f"task type {task_type!r} has two handlers")
            merged[task_type] = handler
    return merged


async def _provision_when_ready(transport: Transport, replicas: int) -> None:
    """Provision, retrying while JetStream is not yet ready (a cluster that just started takes
    a few seconds before it can place replicated streams); the caller's deadline bounds it."""
    while True:
        try:
            await provision(transport, replicas=replicas)
            return
        except (TemporarilyUnavailable, TransportTimeout) as exc:
            log.info("JetStream not ready for provisioning (%s); retrying", exc)
            await trio.sleep(PROVISION_RETRY_INTERVAL_S)


@final
@attrs.frozen
class HostConfig:
    """What one process hosts.

    No ``nats_urls`` means an embedded nats-server: its store is ``data_dir`` (kept) or a
    temporary directory (removed at stop), with ``sync_interval: always`` since a single server
    has no replica to fall back on. ``listen`` None means no REST API. ``provision`` creates the
    streams and buckets with ``replicas`` (a worker-only process leaves that to the servers).
    ``bridge`` serves the HTTP worker bridge on the API (``/bridge/...``, docs/bridge.md), on
    the workers' task consumers (so with their AckWait). ``api_backlog`` is the API's listen
    backlog (connections the kernel queues before they are accepted; capped by
    ``net.core.somaxconn``). ``worker_restart_limit``
    is the ``restart_limit`` of the workers and of the bridge: a journal step fails (reason
    ``restart_limit``) when its iteration was claimed that many times in a row without progress.
    ``client`` is the NATS client the process talks through: ``"native"`` (the Trio client,
    the default) or ``"nats-py"`` (docs/nats-client.md).
    """

    nats_urls: tuple[str, ...] = ()
    data_dir: Path | None = None
    nats_port: int = ANY_NATS_PORT
    provision: bool = True
    replicas: int = 1
    engine: bool = True
    legacy_step_events: bool | None = None
    listen: Listen | None = Listen()
    api_backlog: int = DEFAULT_LISTEN_BACKLOG
    token: str | None = None
    inputs_endpoints: bool = True
    handlers: Mapping[str, Handler] = attrs.field(factory=dict)
    worker_ack_wait_s: float = DEFAULT_ACK_WAIT_S
    worker_restart_limit: int = DEFAULT_RESTART_LIMIT
    client_name: str = "dagnats"
    bridge: bool = True
    client: Client = DEFAULT_CLIENT

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise HostSetupError(f"replicas must be from 1 to {MAX_REPLICAS}, got {self.replicas}")
        try:
            check_backlog(self.api_backlog)
        except ValueError as exc:
            raise HostSetupError(f"API {exc}") from None
        _checked_restart_limit(self.worker_restart_limit)
        parse_nats_client(self.client)


@final
@attrs.frozen
class HostInfo:
    """What a started host runs; ``api_url`` is None without an API, ``server`` None on given
    URLs, ``worker`` None without handlers."""

    nats_urls: tuple[str, ...]
    api_url: str | None
    transport: Transport
    service: Service
    inputs: InputsService
    server: NatsServer | None
    engine: Engine | None
    worker: Worker | None
    bridge: Bridge | None = None


@final
class Host:
    """``info = await nursery.start(Host(config).run)``; cancel the nursery to stop everything
    (the embedded nats-server is stopped even then: its stop is shielded)."""

    def __init__(self, config: HostConfig, *, env: RuntimeEnv = DEFAULT_ENV) -> None:
        self.config = config
        self.env = env

    async def run(
        self, *, task_status: trio.TaskStatus[HostInfo] = trio.TASK_STATUS_IGNORED
    ) -> None:
        cfg = self.config
        async with trio.open_nursery() as nursery:
            with trio.fail_after(HOST_START_TIMEOUT_S):
                server: NatsServer | None = None
                urls = cfg.nats_urls
                if not urls:
                    store = cfg.data_dir / "jetstream" if cfg.data_dir is not None else None
                    server = await nursery.start(
                        NatsServer(store_dir=store, sync_always=True, port=cfg.nats_port).run
                    )
                    urls = (server.url,)
            await nursery.start(self._serve, urls, server, task_status)

    async def _serve(
        self,
        urls: tuple[str, ...],
        server: NatsServer | None,
        host_status: trio.TaskStatus[HostInfo],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        cfg = self.config
        async with (
            open_nats_transport(list(urls), name=cfg.client_name, client=cfg.client) as transport,
            trio.open_nursery() as nursery,
        ):
            if cfg.provision:
                with trio.fail_after(HOST_START_TIMEOUT_S):
                    await _provision_when_ready(transport, cfg.replicas)
                # Before anything serves, so runs stored before the run index existed are
                # indexed ahead of new ones. Not under the start deadline: the first start after
                # an upgrade walks the whole store once; later starts read one key.
                await ensure_run_index(transport)
            with trio.fail_after(HOST_START_TIMEOUT_S):
                service = Service(transport, env=self.env)
                inputs = InputsService(transport, env=self.env)
                engine: Engine | None = None
                if cfg.engine:
                    engine = Engine(
                        transport,
                        env=self.env,
                        inputs=inputs,
                        legacy_step_events=cfg.legacy_step_events,
                    )
                    await nursery.start(engine.run)
                if cfg.inputs_endpoints:
                    endpoints = InputsEndpoints(transport, inputs, token=cfg.token)
                    await nursery.start(endpoints.run)
                worker: Worker | None = None
                if cfg.handlers:
                    worker = Worker(
                        transport,
                        cfg.handlers,
                        inputs=inputs,
                        env=self.env,
                        ack_wait_s=cfg.worker_ack_wait_s,
                        restart_limit=cfg.worker_restart_limit,
                    )
                    await nursery.start(worker.run)
                api_url: str | None = None
                bridge: Bridge | None = None
                if cfg.listen is not None and cfg.bridge:
                    bridge = Bridge(
                        transport,
                        env=self.env,
                        task_ack_wait_s=cfg.worker_ack_wait_s,
                        restart_limit=cfg.worker_restart_limit,
                        inputs=inputs,
                    )
                    await nursery.start(bridge.run)
                if cfg.listen is not None:
                    app = create_app(service, inputs, transport, token=cfg.token, bridge=bridge)
                    api = ApiServer(app, cfg.listen.host, cfg.listen.port, backlog=cfg.api_backlog)
                    api_url = await nursery.start(api.run)
            task_status.started()
            host_status.started(
                HostInfo(urls, api_url, transport, service, inputs, server, engine, worker, bridge)
            )
