"""In-flight writes across a lost answer and a leader kill, on a 3-node cluster whose network the
test controls (``chaos/_proxy.py``): the answers of one node to its client are held, so a write
reaches the cluster and is stored while the writer times out, as when a node dies or the network
splits between the store and the ack.

1. A fenced journal append (``Journal.model``) whose ack is held until the writer times out,
   while the journal stream's leader is SIGKILLed: the ack is lost across a leader change. The
   journal must find its own record at the tail on the new leader, keep it once, go on writing,
   and not fence itself.
2. The engine's compare-and-set of a run snapshot whose answer is held until it times out (the
   write applied): the engine drops its cached snapshot and naks the event; redelivered, the
   event is found applied in the store and its effects are replayed (the task publish
   deduplicated by its message id): the run completes with every step dispatched once.

docs/verification.md ("Node kills and partitions under in-flight writes") cites these.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from chaos import FaultyTransport, ProxiedCluster, ProxyFaults, open_proxied_cluster
from dagnats_trio._env import DEFAULT_ENV, RuntimeEnv
from dagnats_trio.api import Service
from dagnats_trio.journal import Replay, ToolCall, check, open_journal, read_journal
from dagnats_trio.protocol import layout
from dagnats_trio.server import CLUSTER_SIZE, node_name
from dagnats_trio.transport import (
    Headers,
    Transport,
    TransportError,
    TransportTimeout,
    open_nats_transport,
    provision,
)
from tests.engine._fakes import FakeWorker, complete_with, running, test_engine
from tests.journal._helpers import make_task, uid

pytestmark = pytest.mark.cluster

#: The writers' request timeout: short, so that a held answer times out quickly.
WRITER_TIMEOUT_S = 1.0
#: The engine's request timeout in the CAS phase: its held compare-and-set still times out (the
#: node's answers are held until it does), while its start-up requests (a consumer created on a
#: cluster that just took a node back) get the time a loaded machine needs.
ENGINE_TIMEOUT_S = 4.0
#: The observer's request timeout (its node is never held, killed or cut).
OBSERVER_TIMEOUT_S = 5.0
#: Bound on the whole test, cluster start included.
TEST_BOUND_S = 120.0
#: Bound on one wait for the cluster (a record stored, a leader elected).
CLUSTER_WAIT_S = 30.0
POLL_S = 0.1
KV_RUNS_STREAM = "KV_" + layout.RUNS_BUCKET
#: What the CAS phase's engine, worker and service touch.
PHASE_TWO_STREAMS = (
    layout.HISTORY_STREAM,
    layout.TASK_STREAM,
    KV_RUNS_STREAM,
    layout.RUN_INDEX_STREAM,
    layout.RUN_ACTIVE_STREAM,
)


async def stream_cluster(
    control: Transport, stream: str, not_led_by: str | None = None
) -> dict[str, Any]:
    """The cluster part of ``stream``'s info, once it names a leader (other than
    ``not_led_by``)."""
    with trio.fail_after(CLUSTER_WAIT_S):
        while True:
            try:
                raw = await control.request(f"$JS.API.STREAM.INFO.{stream}", b"", timeout_s=2.0)
                info = json.loads(raw)
                cluster = info.get("cluster") or {}
                if cluster.get("leader") not in (None, not_led_by):
                    return dict(cluster)
            except (TransportError, ValueError):
                pass
            await trio.sleep(POLL_S)


async def until_all_current(control: Transport, streams: tuple[str, ...]) -> None:
    """Wait until each of ``streams`` is led and every replica is current (a restarted node has
    caught up), so the next phase starts on a whole cluster."""
    with trio.fail_after(CLUSTER_WAIT_S):
        for stream in streams:
            while True:
                cluster = await stream_cluster(control, stream)
                replicas = cluster.get("replicas") or []
                if len(replicas) == CLUSTER_SIZE - 1 and all(
                    r.get("current") and not r.get("offline") for r in replicas
                ):
                    break
                await trio.sleep(POLL_S)


async def until_stored(control: Transport, run_id: str, step_id: str, n: int) -> None:
    """Wait until the journal holds ``n`` records."""
    with trio.fail_after(CLUSTER_WAIT_S):
        while True:
            if len(await read_journal(control, run_id, step_id)) >= n:
                return
            await trio.sleep(POLL_S)


def index_of(name: str) -> int:
    return [node_name(i) for i in range(CLUSTER_SIZE)].index(name)


async def roles(control: Transport, stream: str) -> tuple[int, int, int]:
    """The leader of ``stream`` and its two followers, as node indexes: the writer uses the
    first follower, the observer (reads, the fake worker) the second, which no fault touches."""
    leader = index_of(str((await stream_cluster(control, stream))["leader"]))
    first, second = (i for i in range(CLUSTER_SIZE) if i != leader)
    return leader, first, second


class SaysWhenAPublishTimesOut(FaultyTransport):
    """The journal writer's transport, unchanged but for an event set when a publish times out."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner, ProxyFaults())
        self.publish_timed_out = trio.Event()

    async def publish(
        self,
        subject: str,
        data: bytes,
        *,
        headers: Headers | None = None,
        msg_id: str | None = None,
        expected_last_subject_seq: int | None = None,
    ) -> int:
        try:
            return await super().publish(
                subject,
                data,
                headers=headers,
                msg_id=msg_id,
                expected_last_subject_seq=expected_last_subject_seq,
            )
        except TransportTimeout:
            self.publish_timed_out.set()
            raise


class HoldOneCas(FaultyTransport):
    """The engine's transport: its first compare-and-set of ``key`` in the runs bucket goes out
    with the node's answers held, so it reaches the cluster and times out; then they flow."""

    def __init__(self, inner: Transport, net: ProxiedCluster, node: int, key: str) -> None:
        super().__init__(inner, ProxyFaults())
        self._inner_t = inner
        self._net = net
        self._node = node
        self._key = key
        self.timed_out = 0

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        if bucket != layout.RUNS_BUCKET or key != self._key or self.timed_out:
            return await self._inner_t.kv_update(bucket, key, value, revision, ttl_s=ttl_s)
        self._net.clients[self._node].hold_answers()
        try:
            return await self._inner_t.kv_update(bucket, key, value, revision, ttl_s=ttl_s)
        except TransportError:
            self.timed_out += 1
            raise
        finally:
            self._net.heal()


@asynccontextmanager
async def connect(
    net: ProxiedCluster, node: int, request_timeout_s: float = WRITER_TIMEOUT_S
) -> AsyncIterator[Transport]:
    """A connection to one node only (through its proxy)."""
    async with open_nats_transport(
        [net.urls[node]], name=f"to-n{node}", request_timeout_s=request_timeout_s
    ) as t:
        yield t


async def test_in_flight_writes_across_a_lost_answer_and_a_leader_kill() -> None:
    with trio.fail_after(TEST_BOUND_S):
        async with (
            open_proxied_cluster() as net,
            open_nats_transport(net.urls, name="control") as control,
        ):
            await provision(control, replicas=CLUSTER_SIZE)
            await _journal_append_across_a_leader_kill(net, control)
            await until_all_current(control, PHASE_TWO_STREAMS)
            await _snapshot_cas_that_timed_out_but_applied(net, control)


async def _journal_append_across_a_leader_kill(net: ProxiedCluster, control: Transport) -> None:
    leader, node, other = await roles(control, layout.JOURNAL_STREAM)
    task = make_task(uid())
    async with connect(net, other, OBSERVER_TIMEOUT_S) as observer, connect(net, node) as conn:
        t = SaysWhenAPublishTimesOut(conn)
        journal = await open_journal(t, task)
        async with trio.open_nursery() as nursery:
            answered = trio.Event()

            async def model() -> str:
                # Called after the journal checked its tail, before it appends the response:
                # from here the node's answers are held, so the append is stored unacknowledged.
                await trio.lowlevel.checkpoint()
                net.clients[node].hold_answers()
                return "m"

            async def model_call() -> None:
                assert await journal.model(model) == "m"
                answered.set()

            nursery.start_soon(model_call)
            await until_stored(observer, task.run_id, task.step_id, 2)
            await net.cluster.kill_node(leader)
            killed_at = trio.current_time()
            # The writer gives up waiting for the ack; then its answers flow again (the held
            # ack arrives too late to count) and it reads the tail while a new leader is elected.
            with trio.fail_after(CLUSTER_WAIT_S):
                await t.publish_timed_out.wait()
            net.heal()
            await stream_cluster(observer, layout.JOURNAL_STREAM, not_led_by=node_name(leader))
            print(f"new journal leader {trio.current_time() - killed_at:.1f} s after the kill")
            with trio.fail_after(CLUSTER_WAIT_S):
                await answered.wait()
        # The journal goes on writing after the lost ack: not fenced, its record kept once.
        out = await journal.tool(ToolCall("t"), Replay.SAFE, _ok)
        assert out.output == "ok"
        stored = await read_journal(observer, task.run_id, task.step_id)
    await net.cluster.start_node(leader)
    kinds = [type(r).__name__ for _, r in stored]
    assert kinds == ["ClaimRecord", "ModelRecord", "ToolIntentRecord", "ToolResultRecord"]
    assert check(stored).ok


async def _ok(call: ToolCall) -> str:
    await trio.lowlevel.checkpoint()
    return "ok"


async def _snapshot_cas_that_timed_out_but_applied(net: ProxiedCluster, control: Transport) -> None:
    _, node, other = await roles(control, KV_RUNS_STREAM)
    async with connect(net, other, OBSERVER_TIMEOUT_S) as observer:
        await _run_through_a_held_cas(net, node, observer)


async def _run_through_a_held_cas(net: ProxiedCluster, node: int, control: Transport) -> None:
    service = Service(control)
    task_type = uid("cas")
    workflow = uid("cas")
    await service.register_workflow(
        {
            "name": workflow,
            "steps": [
                {"id": "a", "task": task_type},
                {"id": "b", "task": task_type, "depends_on": ["a"]},
            ],
        }
    )

    async def script(task: Any) -> Any:
        return await complete_with(task, task.step_id)

    run_id = uid("run")
    async with connect(net, node, ENGINE_TIMEOUT_S) as t:
        engine_t = HoldOneCas(t, net, node, layout.run_key(run_id))
        engine = test_engine(engine_t)
        worker = FakeWorker(control, task_type, script)
        async with running(engine, worker):
            service_for_run = Service(control, _fixed_id_env(run_id))
            await service_for_run.start_run(workflow)
            snap = await service.wait_for_run(run_id, CLUSTER_WAIT_S)
    assert engine_t.timed_out == 1
    assert snap.status.value == "completed" and snap.output == "b"
    # The failed event dropped the cached snapshot; redelivered, it was found applied in the
    # store (no second write, no conflict) and its effects were replayed.
    assert engine.stats.replayed >= 1 and engine.stats.conflicts == 0
    assert sorted(task.step_id for task in worker.seen) == ["a", "b"]  # each dispatched once


def _fixed_id_env(run_id: str) -> RuntimeEnv:
    return RuntimeEnv(wall_ms=DEFAULT_ENV.wall_ms, new_id=lambda: run_id)
