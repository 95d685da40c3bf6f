"""Composing the parts of a process in one Trio nursery.

``dagnats dev``, ``serve``, ``worker`` and ``demo`` all host some subset of: an embedded
nats-server (or given URLs), a transport, provisioning, the engine, the REST API, the NATS inputs
endpoints and workers. Writing that composition once keeps the order of start-up (server before
transport, provisioning before anything that makes consumers, the engine before the API accepts
runs) and the wiring of the inputs service into the engine and the workers in one place, so an
embedding service gets the same process ``dagnats dev`` runs with ``await nursery.start(host.run)``.
The settings it is given are checked in :mod:`._settings`. The HTTP parts (hypercorn, the REST
app, the bridge) are imported only by a host that listens: ``dagnats worker`` loads none of them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, final

import attrs
import trio

from .._defaults import DEFAULT_LISTEN_BACKLOG
from .._env import DEFAULT_ENV, RuntimeEnv
from ..api import Service
from ..engine import Engine, ensure_run_index
from ..inputs import InputsEndpoints, InputsService
from ..journal import DEFAULT_RESTART_LIMIT
from ..server import NatsServer
from ..transport import (
    BUCKETS,
    DEFAULT_CLIENT,
    Client,
    NotProvisioned,
    TemporarilyUnavailable,
    Transport,
    TransportTimeout,
    open_nats_transport,
    provision,
)
from ..worker import DEFAULT_ACK_WAIT_S, Handler, Worker
from ._settings import (
    HostSetupError,
    Listen,
    checked_backlog,
    checked_restart_limit,
    parse_nats_client,
)

if TYPE_CHECKING:
    from ..bridge import Bridge

#: The embedded server picks a free client port when none is asked for.
ANY_NATS_PORT = -1
#: Longest the parts of a host may take to start (server, connect, provision, engine, API).
HOST_START_TIMEOUT_S = 30.0
#: Pause between provisioning attempts while a fresh cluster elects its meta leader.
PROVISION_RETRY_INTERVAL_S = 0.5
#: Longest a host that does not provision (``dagnats worker``) waits for the streams and buckets
#: another process provisions: a script that starts ``dagnats serve`` and a worker at once saw
#: the worker exit ("streams are missing") before the server had made them.
PROVISIONED_WAIT_S = 60.0
#: Pause between looks for them while waiting.
PROVISIONED_POLL_INTERVAL_S = 0.5
#: The key read to look for them (any key: a bucket that holds none answers None).
PROVISIONED_PROBE_KEY = "provisioned-probe"
#: Highest replica count JetStream accepts for a stream.
MAX_REPLICAS = 5

log = logging.getLogger(__name__)


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


async def wait_provisioned(transport: Transport) -> None:
    """Return once the layout is provisioned, waiting up to :data:`PROVISIONED_WAIT_S` for it
    with one log line; past that the last :class:`NotProvisioned` is raised.

    The look is a read of the last bucket :func:`provision` makes (it makes the streams, then
    the buckets, in order), so a layout seen here is whole.
    """
    said = False
    with trio.move_on_after(PROVISIONED_WAIT_S):
        while True:
            try:
                await transport.kv_get(BUCKETS[-1].name, PROVISIONED_PROBE_KEY)
                return
            except NotProvisioned as exc:
                if not said:
                    log.warning(
                        "waiting up to %g s for the JetStream streams (made by `dagnats "
                        "serve` or `dev`): %s",
                        PROVISIONED_WAIT_S,
                        exc,
                    )
                    said = True
            await trio.sleep(PROVISIONED_POLL_INTERVAL_S)
    # The deadline passed: the answer it gives now is the error.
    await transport.kv_get(BUCKETS[-1].name, PROVISIONED_PROBE_KEY)


@final
@attrs.frozen
class HostConfig:
    """What one process hosts.

    No ``nats_urls`` means an embedded nats-server: its store is ``data_dir`` (kept) or a
    temporary directory (removed at stop), with ``sync_interval: always`` since a single server
    has no replica to fall back on. ``listen`` None means no REST API. ``provision`` creates the
    streams and buckets with ``replicas`` (a worker-only process leaves that to the servers, and
    waits up to ``PROVISIONED_WAIT_S`` for them: :func:`wait_provisioned`).
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
    listen: Listen | None = Listen()  # noqa: RUF009 - Listen is a frozen attrs class
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
        checked_backlog(self.api_backlog)
        checked_restart_limit(self.worker_restart_limit)
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
            else:
                # Not under the start deadline: its own, with a line saying what it waits for.
                await wait_provisioned(transport)
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
                if cfg.listen is not None:
                    # Here, not at the top: a worker-only host serves no HTTP, and these load
                    # hypercorn and the REST and bridge routes.
                    from ..api.rest import create_app
                    from ..api.server import ApiServer
                    from ..bridge import Bridge
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
                    app = create_app(
                        service,
                        inputs,
                        transport,
                        token=cfg.token,
                        bridge=bridge,
                        listen_host=cfg.listen.host,
                    )
                    api = ApiServer(app, cfg.listen.host, cfg.listen.port, backlog=cfg.api_backlog)
                    api_url = await nursery.start(api.run)
            task_status.started()
            host_status.started(
                HostInfo(urls, api_url, transport, service, inputs, server, engine, worker, bridge)
            )
