"""The two places a soak runs: one :class:`SimServer`, or real nats-servers (one node or three)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs
import trio

from dagnats_trio._env import deterministic_env
from dagnats_trio.server import CLUSTER_SIZE, open_nats_server
from dagnats_trio.testing import FaultKind, run_deterministic
from dagnats_trio.transport import SimFaults, SimServer, Transport, open_nats_transport

from ._faults import FaultyTransport, ProxyFaults, ProxyInjector, SimInjector
from ._nodes import NodeFaults, open_proxied_cluster
from ._schedule import BASE_KINDS, CLUSTER_KINDS
from ._soak import SoakConfig, SoakResult, soak

#: Real servers: short AckWaits so that stalls and kills resolve in seconds.
REAL_WORKER_ACK_WAIT_S = 1.5
REAL_ENGINE_ACK_WAIT_S = 2.0
REAL_RUN_DEADLINE_S = 60.0
REAL_PARALLEL_RUNS = 6


def real_config(
    seed: int, runs: int, *, parallel: int | None = None, budget_s: float | None = None
) -> SoakConfig:
    """The soak's settings on real servers (``--real``, ``--cluster``, and the suite's test)."""
    return SoakConfig(
        seed=seed,
        runs=runs,
        parallel_runs=parallel or REAL_PARALLEL_RUNS,
        worker_ack_wait_s=REAL_WORKER_ACK_WAIT_S,
        engine_ack_wait_s=REAL_ENGINE_ACK_WAIT_S,
        run_deadline_s=REAL_RUN_DEADLINE_S,
        budget_s=budget_s,
    )


@attrs.define
class SimBackend:
    server: SimServer
    injector: SimInjector
    name: str = "sim"
    replicas: int = 1
    kinds: tuple[FaultKind, ...] = BASE_KINDS

    def connect(self) -> AbstractAsyncContextManager[Transport]:
        return self.server.connect()


def sim_backend() -> SimBackend:
    """A fresh simulated server (call it inside the Trio run that uses it)."""
    faults = SimFaults()
    return SimBackend(SimServer(faults), SimInjector(faults))


async def sim_soak(config: SoakConfig) -> SoakResult:
    """The soak on the simulation, with the ids and times of ``deterministic_env``. Deterministic
    when run by :func:`run_sim_soak`."""
    return await soak(config, sim_backend(), deterministic_env(config.seed))


def run_sim_soak(config: SoakConfig) -> SoakResult:
    """:func:`sim_soak` in its own ``trio.run`` on the autojump clock with Trio's scheduler
    deterministic (:func:`~dagnats_trio.testing.run_deterministic`): one seed gives one trace.
    Raises ``SchedulingUnavailable`` without Hypothesis."""
    return run_deterministic(sim_soak, config)


@attrs.define
class RealBackend:
    urls: list[str]
    injector: ProxyInjector
    faults: ProxyFaults
    name: str
    replicas: int = 1
    kinds: tuple[FaultKind, ...] = BASE_KINDS
    _names: itertools.count[int] = attrs.field(factory=itertools.count)

    def connect(self) -> AbstractAsyncContextManager[Transport]:
        return self._connect()

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Transport]:
        async with open_nats_transport(self.urls, name=f"chaos-{next(self._names)}") as inner:
            yield FaultyTransport(inner, self.faults)


def real_backend(urls: list[str]) -> RealBackend:
    """A backend over servers someone else runs (step-downs are no-ops). The soak uses fixed
    consumer names and run ids, so the servers should be the soak's own."""
    faults = ProxyFaults()
    return RealBackend(list(urls), ProxyInjector(faults), faults, "real")


@asynccontextmanager
async def open_real_backend(*, cluster: bool) -> AsyncIterator[RealBackend]:
    """An embedded nats-server (or a 3-node cluster with 3-replica streams, its nodes killed,
    paused and cut off by the schedule's node faults) for the soak."""
    faults = ProxyFaults()
    async with trio.open_nursery() as nursery:
        if cluster:
            async with (
                open_proxied_cluster() as net,
                open_nats_transport(net.urls, name="chaos-control") as control,
            ):
                nodes = NodeFaults(net, control)
                injector = ProxyInjector(faults, control=control, nursery=nursery, nodes=nodes)
                yield RealBackend(
                    net.urls,
                    injector,
                    faults,
                    "cluster",
                    replicas=CLUSTER_SIZE,
                    kinds=CLUSTER_KINDS,
                )
                nursery.cancel_scope.cancel()
        else:
            async with open_nats_server() as s:
                yield RealBackend([s.url], ProxyInjector(faults), faults, "real")
                nursery.cancel_scope.cancel()
