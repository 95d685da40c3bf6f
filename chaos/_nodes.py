"""Node faults on a 3-node cluster: a node SIGKILLed and restarted on its store, a node paused
with SIGSTOP and resumed (a zombie leader), a node cut off from the other two and healed.

:func:`open_proxied_cluster` starts the cluster with every byte between two nodes going through
a :class:`TcpProxy` of this process (one per direction of each pair, so that cutting a node
holds exactly its own links), and every client going through one proxy per node. Each node
advertises a route port that leads nowhere, so no route learned by gossip can go around the
proxies, and keeps the other nodes' client URLs to itself, so clients keep to the proxies too.

:class:`NodeFaults` performs the faults one at a time (a second one waits for the first to end
and the cluster to recover: two nodes out of three down at once is an outage, not a fault the
runtime is meant to ride through), and measures how long the cluster took to have a leader and
every replica current on each of the runtime's streams again.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import final

import attrs
import trio

from dagnats_trio.server import (
    CLUSTER_SIZE,
    NatsCluster,
    NatsServer,
    RouteLayout,
    free_port,
    node_name,
)
from dagnats_trio.server import open_nats_cluster as _open_nats_cluster
from dagnats_trio.testing import NODE_KINDS, Fault, FaultKind, Target
from dagnats_trio.transport import StreamSpec, Transport, TransportError

from ._faults import stream_of
from ._proxy import LOOPBACK, TcpProxy

log = logging.getLogger("chaos")

#: Bound on one stream-info request while picking a node or checking recovery.
INFO_REQUEST_TIMEOUT_S = 2.0
#: Bound on the cluster's recovery after a node fault ends (leader and every replica current).
RECOVERY_MAX_S = 60.0
#: Pause between recovery checks.
RECOVERY_POLL_S = 0.2
#: The quorum probe: a 3-replica stream of its own, published to this often (and each publish
#: given this long) from the start of each node fault until one succeeds after the fault ended.
PROBE_STREAM = "CHAOS_QUORUM_PROBE"
PROBE_SUBJECT = "chaos.quorum.probe"
PROBE_INTERVAL_S = 0.2
PROBE_PUBLISH_TIMEOUT_S = 1.0
#: Streams whose recovery is awaited: the ones the faults aim at.
RECOVERY_STREAMS: tuple[str, ...] = tuple(stream_of(t) for t in Target)


@final
@attrs.define
class ProxiedCluster:
    cluster: NatsCluster
    #: ``routes[(i, j)]``: the proxy node ``i`` dials to reach node ``j``.
    routes: dict[tuple[int, int], TcpProxy]
    #: ``clients[i]``: the proxy clients dial to reach node ``i``.
    clients: tuple[TcpProxy, ...]

    @property
    def urls(self) -> list[str]:
        return [f"nats://{LOOPBACK}:{p.port}" for p in self.clients]

    def cut(self, index: int) -> int:
        """Cut node ``index`` off from the other two; returns the client links left on its side
        (they stay connected to it; new clients cannot reach it)."""
        for (i, j), proxy in self.routes.items():
            if index in (i, j):
                proxy.cut()
        self.clients[index].cut(existing=False)
        return self.clients[index].live

    def heal(self) -> None:
        for proxy in self.routes.values():
            proxy.heal()
        for proxy in self.clients:
            proxy.heal()


@asynccontextmanager
async def open_proxied_cluster() -> AsyncIterator[ProxiedCluster]:
    """A running 3-node cluster whose routes and clients go through proxies of this process."""
    listen = tuple(free_port() for _ in range(CLUSTER_SIZE))
    async with trio.open_nursery() as nursery:
        routes: dict[tuple[int, int], TcpProxy] = {}
        for i in range(CLUSTER_SIZE):
            for j in range(CLUSTER_SIZE):
                if i != j:
                    proxy = TcpProxy(f"route n{i}->n{j}", functools.partial(int, listen[j]))
                    routes[(i, j)] = await nursery.start(proxy.run)
        # Held forever: a route dialled at an advertised port goes nowhere.
        nowhere = await nursery.start(TcpProxy("nowhere", lambda: 0).run)
        nowhere.cut()
        dial = tuple(
            tuple(routes[(i, j)].port for j in range(CLUSTER_SIZE) if j != i)
            for i in range(CLUSTER_SIZE)
        )
        layout_ = RouteLayout(
            listen, dial, advertise_ports=(nowhere.port,) * CLUSTER_SIZE, no_advertise=True
        )
        async with _open_nats_cluster(routes=layout_) as cluster:
            clients = []
            for i, node in enumerate(cluster.nodes):
                proxy = TcpProxy(f"client n{i}", functools.partial(_port_of, node))
                clients.append(await nursery.start(proxy.run))
            yield ProxiedCluster(cluster, routes, tuple(clients))
            nursery.cancel_scope.cancel()


def _port_of(node: NatsServer) -> int:
    return node.port


@final
class NodeFaults:
    """Performs node faults on a :class:`ProxiedCluster`, one at a time; ``control`` is a
    connection used to ask who leads a stream and whether the cluster has recovered."""

    def __init__(self, net: ProxiedCluster, control: Transport) -> None:
        self._net = net
        self._control = control
        self._one_at_a_time = trio.Lock()
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()
        #: Set while at most one fault is in flight (none waits behind it).
        self._room = trio.Event()
        self._room.set()
        self.done = dict.fromkeys(NODE_KINDS, 0)
        self.on_leader = 0
        #: Client links on the cut-off side, summed over partitions.
        self.cut_off_clients = 0
        #: Longest time from a fault's start until every stream had a leader and every replica
        #: was current again, and from the fault's end (heal, resume, restart) until then.
        self.worst_outage_s = 0.0
        self.worst_recovery_s = 0.0
        self.unrecovered = 0
        #: Longest stretch the quorum probe's publishes went unacknowledged.
        self.worst_quorum_wait_s = 0.0
        self._probe_ready = False

    async def inject(self, fault: Fault) -> None:
        """Perform ``fault`` once the one before it is over; restores the node even when
        cancelled."""
        if fault.kind not in NODE_KINDS:
            raise ValueError(f"not a node fault: {fault.kind}")
        self._in_flight += 1
        self._idle = trio.Event() if self._idle.is_set() else self._idle
        if self._in_flight > 1 and self._room.is_set():
            self._room = trio.Event()
        try:
            async with self._one_at_a_time:
                await self._perform(fault)
        finally:
            self._in_flight -= 1
            if not self._in_flight:
                self._idle.set()
            if self._in_flight <= 1:
                self._room.set()

    async def wait_idle(self) -> None:
        await self._idle.wait()

    async def wait_room(self) -> None:
        """Return once no fault waits behind the one being performed: the soak starts its next
        run only then, so that faults do not pile up behind each other and land on runs long
        after the ones that drew them."""
        await self._room.wait()

    async def _perform(self, fault: Fault) -> None:
        if not self._probe_ready:
            with trio.move_on_after(RECOVERY_MAX_S):
                spec = StreamSpec(PROBE_STREAM, (PROBE_SUBJECT,), max_age_s=60.0)
                await self._control.ensure_stream(spec, replicas=CLUSTER_SIZE)
                self._probe_ready = True
        over = trio.Event()
        async with trio.open_nursery() as nursery:
            if self._probe_ready:
                nursery.start_soon(self._probe, over)
            try:
                await self._fault_and_recovery(fault)
            finally:
                over.set()

    async def _probe(self, over: trio.Event) -> None:
        """Publish to the probe stream until a publish succeeds after ``over``; the longest run
        of failed publishes is how long a writer waited for a quorum."""
        failing_since: float | None = None
        with trio.move_on_after(RECOVERY_MAX_S * 2):
            while True:
                attempt = trio.current_time()
                ok = False
                with trio.move_on_after(PROBE_PUBLISH_TIMEOUT_S):
                    try:
                        await self._control.publish(PROBE_SUBJECT, b"probe")
                        ok = True
                    except TransportError:
                        pass
                if ok:
                    if failing_since is not None:
                        wait = trio.current_time() - failing_since
                        self.worst_quorum_wait_s = max(self.worst_quorum_wait_s, wait)
                        failing_since = None
                    if over.is_set():
                        return
                elif failing_since is None:
                    failing_since = attempt
                await trio.sleep(PROBE_INTERVAL_S)

    async def _fault_and_recovery(self, fault: Fault) -> None:
        index, leader = await self._pick(fault)
        cluster = self._net.cluster
        started = trio.current_time()
        log.info("%s on node %d (leader=%s)", fault.describe(), index, leader)
        try:
            if fault.kind is FaultKind.NODE_KILL:
                await cluster.kill_node(index)
            elif fault.kind is FaultKind.NODE_PAUSE:
                cluster.pause_node(index)
            else:
                self.cut_off_clients += self._net.cut(index)
            self.done[fault.kind] += 1
            self.on_leader += leader
            await trio.sleep(fault.window_s)
        finally:
            with trio.CancelScope(shield=True):
                await self._restore(fault.kind, index)
        ended = trio.current_time()
        with trio.move_on_after(RECOVERY_MAX_S) as scope:
            await self._until_recovered()
        if scope.cancelled_caught:
            self.unrecovered += 1
            log.warning("cluster not recovered %.0f s after %s", RECOVERY_MAX_S, fault.describe())
            return
        now = trio.current_time()
        self.worst_outage_s = max(self.worst_outage_s, now - started)
        self.worst_recovery_s = max(self.worst_recovery_s, now - ended)

    async def _restore(self, kind: FaultKind, index: int) -> None:
        if kind is FaultKind.NODE_KILL:
            await self._net.cluster.start_node(index)
        elif kind is FaultKind.NODE_PAUSE:
            self._net.cluster.resume_node(index)
        else:
            self._net.heal()

    async def _info(self, stream: str) -> dict[str, object] | None:
        try:
            answer = await self._control.request(
                f"$JS.API.STREAM.INFO.{stream}", b"", timeout_s=INFO_REQUEST_TIMEOUT_S
            )
        except TransportError:
            return None
        try:
            body = json.loads(answer or b"{}")
        except ValueError:
            return None
        if not isinstance(body, dict) or "error" in body:
            return None
        cluster = body.get("cluster")
        return cluster if isinstance(cluster, dict) else None

    async def _pick(self, fault: Fault) -> tuple[int, bool]:
        """The node the fault hits: the leader of its target's stream, or the first follower by
        name (node 0, or 1 for a follower, when no leader is known)."""
        info = await self._info(stream_of(fault.target))
        names = [node_name(i) for i in range(CLUSTER_SIZE)]
        leader = info.get("leader") if info is not None else None
        if leader not in names:
            return (0 if fault.on_leader else 1), False
        if fault.on_leader:
            return names.index(str(leader)), True
        followers = sorted(n for n in names if n != leader)
        return names.index(followers[0]), False

    async def _until_recovered(self) -> None:
        while True:
            if all([await self._current(s) for s in RECOVERY_STREAMS]):
                return
            await trio.sleep(RECOVERY_POLL_S)

    async def _current(self, stream: str) -> bool:
        info = await self._info(stream)
        if info is None or not info.get("leader"):
            return False
        replicas = info.get("replicas")
        if not isinstance(replicas, list) or len(replicas) != CLUSTER_SIZE - 1:
            return False
        return all(isinstance(r, dict) and r.get("current") is True for r in replicas)

    def notes(self) -> tuple[str, ...]:
        done = " ".join(f"{k.value}={n}" for k, n in self.done.items())
        return (
            f"node faults: {done} ({self.on_leader} on a stream leader); client links on the "
            f"cut-off side: {self.cut_off_clients}",
            f"worst outage (fault start to every stream led and current): "
            f"{self.worst_outage_s:.1f} s; worst recovery after the fault ended: "
            f"{self.worst_recovery_s:.1f} s; not recovered within {RECOVERY_MAX_S:.0f} s: "
            f"{self.unrecovered}",
            f"worst quorum wait (a publish to a 3-replica stream every {PROBE_INTERVAL_S} s "
            f"through one client, unacknowledged): {self.worst_quorum_wait_s:.1f} s",
        )
