"""A 3-node nats-server cluster on loopback, for replica and leader-change tests."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, final

import attrs
import trio

from . import _probe
from ._binary import NatsServerError
from ._config import ClusterSettings, free_port
from ._node import NatsServer
from ._tempdir import CLUSTER_DIR_PREFIX, owned_temp_dir

CLUSTER_SIZE = 3
CLUSTER_NAME = "dagnats"
#: How long a fresh cluster may take until a 3-replica stream can be created.
CLUSTER_READY_TIMEOUT_S = 30.0
#: How long a restarted node may take until its JetStream API answers.
NODE_READY_TIMEOUT_S = 20.0
#: Pause between readiness attempts (each attempt is one API request).
CLUSTER_POLL_INTERVAL_S = 0.1
#: Bound on one readiness request.
PROBE_REQUEST_TIMEOUT_S = 2.0
_READY_STREAM = "DAGNATS_CLUSTER_READY"


@final
@attrs.frozen
class RouteLayout:
    """Which route port each node listens on, which ports it dials to reach the others, and
    which port it advertises. :meth:`direct` is the plain cluster; a chaos test builds one whose
    dialled and advertised ports are proxies it controls, to cut a node off."""

    listen_ports: tuple[int, ...]
    #: ``dial_ports[i]``: the ports node ``i`` dials (its ``routes``).
    dial_ports: tuple[tuple[int, ...], ...]
    advertise_ports: tuple[int | None, ...] = (None,) * CLUSTER_SIZE
    #: Keep client URLs of the other nodes out of INFO (clients keep to the URLs given).
    no_advertise: bool = False

    @classmethod
    def direct(cls) -> RouteLayout:
        """Free loopback ports, every node dialling every node's own port."""
        ports = tuple(free_port() for _ in range(CLUSTER_SIZE))
        return cls(ports, (ports,) * CLUSTER_SIZE)

    def settings(self, name: str, index: int) -> ClusterSettings:
        return ClusterSettings(
            name,
            self.listen_ports[index],
            self.dial_ports[index],
            advertise_port=self.advertise_ports[index],
            no_advertise=self.no_advertise,
        )


@final
class NatsCluster:
    """Three routed nats-servers with JetStream, each with its own store directory.

    The cluster keeps the default (timer) sync: replicas, not fsync, carry its durability.
    """

    def __init__(self, *, name: str = CLUSTER_NAME, routes: RouteLayout | None = None) -> None:
        self._name = name
        self._routes = routes
        self._dir: Path | None = None
        self._nodes: list[NatsServer] = []

    @property
    def nodes(self) -> tuple[NatsServer, ...]:
        return tuple(self._nodes)

    @property
    def urls(self) -> list[str]:
        """Client URLs of all nodes (also of stopped ones, which come back on the same port)."""
        return [node.url if node.running else node.last_url for node in self._nodes]

    async def start(self) -> None:
        """Start every node and return once a 3-replica stream can be created."""
        if self._nodes:
            raise NatsServerError("cluster already started")
        self._dir = owned_temp_dir(CLUSTER_DIR_PREFIX)
        routes = self._routes or RouteLayout.direct()
        self._nodes = [
            NatsServer(
                store_dir=self._dir / f"n{i}",
                sync_always=False,
                server_name=node_name(i),
                cluster=routes.settings(self._name, i),
            )
            for i in range(CLUSTER_SIZE)
        ]
        try:
            async with trio.open_nursery() as nursery:
                for node in self._nodes:
                    nursery.start_soon(node.start)
            with trio.fail_after(CLUSTER_READY_TIMEOUT_S):
                await self._until_replicated_stream()
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, trio.TooSlowError):
                raise NatsServerError(
                    f"cluster not ready for a 3-replica stream within {CLUSTER_READY_TIMEOUT_S}s"
                ) from None
            raise

    async def _until_replicated_stream(self) -> None:
        config = {
            "name": _READY_STREAM,
            "subjects": ["_dagnats_ready.>"],
            "num_replicas": CLUSTER_SIZE,
            "storage": "memory",
        }
        while True:
            answer = await self._try(0, f"$JS.API.STREAM.CREATE.{_READY_STREAM}", config)
            if answer is not None and "error" not in answer:
                await self._try(0, f"$JS.API.STREAM.DELETE.{_READY_STREAM}", {})
                return
            await trio.sleep(CLUSTER_POLL_INTERVAL_S)

    async def _try(
        self, index: int, subject: str, payload: dict[str, Any]
    ) -> dict[str, Any] | None:
        with trio.move_on_after(PROBE_REQUEST_TIMEOUT_S):
            try:
                return await _probe.api_request(self._nodes[index].port, subject, payload)
            except (OSError, NatsServerError, ValueError):
                return None
        return None

    async def stop_node(self, index: int) -> None:
        """Stop one node; its store and port are kept for :meth:`start_node`."""
        await self._nodes[index].stop_process()

    async def start_node(self, index: int) -> None:
        """Start a stopped node again and wait until its JetStream API answers."""
        node = self._nodes[index]
        await node.start()
        with trio.fail_after(NODE_READY_TIMEOUT_S):
            while True:
                answer = await self._try(index, "$JS.API.INFO", {})
                if answer is not None and "error" not in answer:
                    return
                await trio.sleep(CLUSTER_POLL_INTERVAL_S)

    async def kill_node(self, index: int) -> None:
        """SIGKILL one node (no shutdown); its store and port are kept for :meth:`start_node`."""
        await self._nodes[index].kill_process()

    def pause_node(self, index: int) -> None:
        """SIGSTOP one node: it keeps its sockets open and answers nothing."""
        self._nodes[index].pause()

    def resume_node(self, index: int) -> None:
        """SIGCONT a node paused by :meth:`pause_node`."""
        self._nodes[index].resume()

    async def stop(self) -> None:
        """Stop every node and remove all stores."""
        with trio.CancelScope(shield=True):
            for node in self._nodes:
                await node.stop()
        self._nodes = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    async def run(
        self, *, task_status: trio.TaskStatus[NatsCluster] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled: ``cluster = await nursery.start(NatsCluster().run)``."""
        await self.start()
        try:
            task_status.started(self)
            await trio.sleep_forever()
        finally:
            await self.stop()


def node_name(index: int) -> str:
    """The ``server_name`` of node ``index`` (what stream infos name leaders and replicas by)."""
    return f"n{index}"


@asynccontextmanager
async def open_nats_cluster(
    *, name: str = CLUSTER_NAME, routes: RouteLayout | None = None
) -> AsyncIterator[NatsCluster]:
    """A running 3-node cluster for the duration of the block."""
    cluster = NatsCluster(name=name, routes=routes)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()
