"""A feed's waiting pull request across a consumer-leader step-down on a 3-node cluster.

The request waits on the consumer's leader; when leadership moves, the new leader knows nothing
of it. The feed asks again (the old leader ends the request with a 409, or the feed takes it as
lost), so an event stored after the step-down reaches the engine's loop well before the lost
request's ``expires`` would have ended it, and nothing is delivered twice.
"""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.server import NatsCluster
from dagnats_trio.transport import (
    ConsumerConfig,
    StreamSpec,
    Transport,
)
from dagnats_trio.transport._trio_nats_connect import open_trio_nats_transport
from dagnats_trio.transport._trio_nats_feed import STANDING_PULL_EXPIRES_S

# The cluster's elections are waited out as the other cluster tests do (the same attempts,
# pause and request timeout, and their JetStream API call).
from .test_cluster import MAX_ATTEMPTS, REQUEST_TIMEOUT_S, RETRY_PAUSE_S, Retriable, api

pytestmark = pytest.mark.cluster

STREAM = "CLUSTER_FEED"
DURABLE = "feed"
REPLICAS = 3
ACK_WAIT_S = 60.0
FEED_BATCH = 64
#: Events before and after the step-down.
EVENTS = 5
#: A feed fetch's wait (the engine's).
FETCH_WAIT_S = 1.0
TEST_BOUND_S = 90.0


async def _publish(t: Transport, body: bytes) -> None:
    for _ in range(MAX_ATTEMPTS):
        try:
            await t.publish("feed.run", body, msg_id=body.decode())
            return
        except Retriable:
            await trio.sleep(RETRY_PAUSE_S)  # electing; the msg id makes the retry safe
    raise AssertionError(f"{body!r} never stored")


async def _consumer_leader(t: Transport) -> str | None:
    info = await api(t, f"$JS.API.CONSUMER.INFO.{STREAM}.{DURABLE}")
    name = (info.get("cluster") or {}).get("leader")
    return str(name) if name else None


async def test_a_feed_asks_again_after_a_consumer_leader_step_down(
    nats_cluster: NatsCluster,
) -> None:
    got: list[bytes] = []
    with trio.fail_after(TEST_BOUND_S):
        async with open_trio_nats_transport(
            nats_cluster.urls, name="cluster-feed", request_timeout_s=REQUEST_TIMEOUT_S
        ) as t:
            await t.ensure_stream(StreamSpec(STREAM, ("feed.>",)), replicas=REPLICAS)
            await t.ensure_consumer(ConsumerConfig(STREAM, DURABLE, "feed.>", ACK_WAIT_S))
            async with t.consume(STREAM, DURABLE, FEED_BATCH) as feed:
                for i in range(EVENTS):
                    await _publish(t, b"before-%d" % i)
                while len(got) < EVENTS:
                    for d in await feed.fetch(FETCH_WAIT_S):
                        got.append(d.data)
                        await d.ack()
                first_leader = await _consumer_leader(t)
                reply = await api(t, f"$JS.API.CONSUMER.LEADER.STEPDOWN.{STREAM}.{DURABLE}")
                assert reply.get("success") is True, reply
                for _ in range(MAX_ATTEMPTS):
                    new_leader = await _consumer_leader(t)
                    if new_leader not in (None, first_leader):
                        break
                    await trio.sleep(RETRY_PAUSE_S)
                assert new_leader not in (None, first_leader)
                for i in range(EVENTS):
                    await _publish(t, b"after-%d" % i)
                stored_at = trio.current_time()
                while len(got) < 2 * EVENTS:
                    for d in await feed.fetch(FETCH_WAIT_S):
                        got.append(d.data)
                        await d.ack()
                waited = trio.current_time() - stored_at
    print(f"after the step-down ({first_leader} -> {new_leader}) the events came in {waited:.2f} s")
    assert got == [b"before-%d" % i for i in range(EVENTS)] + [
        b"after-%d" % i for i in range(EVENTS)
    ]
    assert waited < STANDING_PULL_EXPIRES_S
