"""The two places a soak runs: one :class:`SimServer`, or real nats-servers (one node or three)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import attrs
import trio

from dagnats_trio._env import deterministic_env
from dagnats_trio.server import CLUSTER_SIZE, open_nats_cluster, open_nats_server
from dagnats_trio.transport import SimFaults, SimServer, Transport, open_nats_transport

from ._faults import FaultyTransport, ProxyFaults, ProxyInjector, SimInjector
from ._soak import SoakConfig, SoakResult, soak


@attrs.define
class SimBackend:
    server: SimServer
    injector: SimInjector
    name: str = "sim"
    replicas: int = 1

    def connect(self) -> AbstractAsyncContextManager[Transport]:
        return self.server.connect()


def sim_backend() -> SimBackend:
    """A fresh simulated server (call it inside the Trio run that uses it)."""
    faults = SimFaults()
    return SimBackend(SimServer(faults), SimInjector(faults))


async def sim_soak(config: SoakConfig) -> SoakResult:
    """The deterministic soak on the simulation. Run it under ``MockClock(autojump_threshold=0)``
    inside ``deterministic_scheduling(config.seed)``: then one seed gives one trace."""
    return await soak(config, sim_backend(), deterministic_env(config.seed))


@attrs.define
class RealBackend:
    urls: list[str]
    injector: ProxyInjector
    faults: ProxyFaults
    name: str
    replicas: int = 1
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
    """An embedded nats-server (or a 3-node cluster with 3-replica streams) for the soak."""
    faults = ProxyFaults()
    async with trio.open_nursery() as nursery:
        if cluster:
            async with (
                open_nats_cluster() as c,
                open_nats_transport(c.urls, name="chaos-control") as control,
            ):
                injector = ProxyInjector(faults, control=control, nursery=nursery)
                yield RealBackend(c.urls, injector, faults, "cluster", replicas=CLUSTER_SIZE)
                nursery.cancel_scope.cancel()
        else:
            async with open_nats_server() as s:
                yield RealBackend([s.url], ProxyInjector(faults), faults, "real")
                nursery.cancel_scope.cancel()
