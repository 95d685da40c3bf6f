"""Given one node of a 3-node cluster, the client learns the others from INFO and fails over
to them when its node stops, with its subscriptions back."""

from __future__ import annotations

import random
import uuid

import pytest
import trio

from dagnats_trio.nats import open_connection
from dagnats_trio.server import CLUSTER_SIZE, NatsCluster

pytestmark = pytest.mark.cluster

#: Bound on the fail-over (the machine is shared).
WAIT_S = 30.0


async def test_discovers_the_cluster_and_fails_over(nats_cluster: NatsCluster) -> None:
    first, *others = nats_cluster.urls
    subject = f"nc.cluster.{uuid.uuid4().hex[:12]}"
    async with (
        open_connection(first, random=random.Random(5)) as conn,
        open_connection(others[0]) as other,
        conn.subscribe(subject) as sub,
    ):
        assert conn.connected_url == first
        assert sorted(conn.servers) == sorted(nats_cluster.urls)  # learned from INFO
        assert len(conn.servers) == CLUSTER_SIZE
        await conn.flush()
        await nats_cluster.stop_node(0)
        with trio.fail_after(WAIT_S):
            await conn.flush()  # reconnected to another node
            assert conn.connected_url in others
            await other.flush()
            # a message from another node's client reaches the resubscribed subscription
            while True:
                await other.publish(subject, b"after fail-over")
                with trio.move_on_after(0.5):
                    msg = await sub.next_msg()
                    break
        assert msg.payload == b"after fail-over"
        assert conn.stats().reconnects == 1

    async with open_connection(others[0], discover_servers=False) as conn:
        assert conn.servers == (others[0],)
