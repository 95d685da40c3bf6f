"""Per-message TTL on a key-value bucket, held to one behaviour on nats-server and SimTransport:
a write with ``ttl_s`` disappears that long after it, a later write without one replaces it and
stays, a bucket not provisioned for it refuses the write, and a bucket provisioned with a
bucket-wide TTL is moved to per-message TTLs by provisioning again."""

from __future__ import annotations

import pytest
import trio

from dagnats_trio.protocol.layout import INPUTS_BUCKET
from dagnats_trio.transport import BucketSpec, NatsTransport, Transport, TransportError

#: The TTL these tests write (the shortest the server takes).
TTL_S = 1
#: The longest a test waits for an expiry that must come (real clock: the server's expiry timer
#: runs on its own schedule, and the machine may be loaded).
EXPIRY_BOUND_S = 15.0
#: Between two reads while waiting for an expiry (a TTL has no event to wait on).
POLL_S = 0.1


async def gone_within(t: Transport, bucket: str, key: str, bound_s: float) -> float:
    """Seconds until ``key`` is gone, failing after ``bound_s``."""
    start = trio.current_time()
    # An expiry sends nothing a watch could see (no delete marker), so this reads until it is
    # gone, under a bound.
    with trio.fail_after(bound_s):
        while True:
            if await t.kv_get(bucket, key) is None:
                return trio.current_time() - start
            await trio.sleep(POLL_S)


async def test_a_write_with_a_ttl_expires_and_one_without_stays(
    transport: Transport, clock: object, uid: str
) -> None:
    t = transport
    bucket = f"ttl{uid}"
    await t.ensure_bucket(BucketSpec(bucket, message_ttl=True))
    rev = await t.kv_create(bucket, "short", b"1", ttl_s=TTL_S)
    await t.kv_create(bucket, "kept", b"1")
    # A later write without a TTL replaces the one with it, and lives on.
    rev2 = await t.kv_create(bucket, "replaced", b"1", ttl_s=TTL_S)
    await t.kv_update(bucket, "replaced", b"2", rev2)
    # And the reverse: a key written without a TTL gets one from its last write.
    rev3 = await t.kv_create(bucket, "later", b"1")
    await t.kv_update(bucket, "later", b"2", rev3, ttl_s=TTL_S)
    assert (await t.kv_get(bucket, "short")) is not None
    assert rev > 0

    took = await gone_within(t, bucket, "short", EXPIRY_BOUND_S)
    await gone_within(t, bucket, "later", EXPIRY_BOUND_S)
    print(f"per-message TTL {TTL_S} s: gone after {took:.2f} s")
    assert took >= TTL_S * 0.5
    assert await t.kv_keys(bucket) == ["kept", "replaced"]
    kept = await t.kv_get(bucket, "replaced")
    assert kept is not None and kept.value == b"2"
    # An expired key can be created again.
    assert await t.kv_create(bucket, "short", b"again") > 0


async def test_a_bucket_without_message_ttl_refuses_a_ttl_write(
    transport: Transport, clock: object, uid: str
) -> None:
    t = transport
    bucket = f"nottl{uid}"
    await t.ensure_bucket(BucketSpec(bucket))
    with pytest.raises(TransportError):
        await t.kv_create(bucket, "k", b"1", ttl_s=TTL_S)
    assert await t.kv_get(bucket, "k") is None
    with pytest.raises(ValueError, match="whole seconds"):
        await t.kv_create(bucket, "k", b"1", ttl_s=0.5)


async def test_provisioning_moves_a_bucket_wide_ttl_to_per_message_ttls(
    nats_transport: NatsTransport,
) -> None:
    """A store provisioned by an older version (the inputs bucket with a seven-day bucket-wide
    TTL) is updated in place: no bucket-wide age limit, per-message TTLs allowed."""
    t = nats_transport
    bucket = f"old{trio.current_time():.0f}".replace(".", "")
    await t.ensure_bucket(BucketSpec(bucket, ttl_s=7 * 24 * 3600.0))
    await t.kv_put(bucket, "kept", b"1")
    await t.ensure_bucket(BucketSpec(bucket, message_ttl=True))
    info = await t.stream_info(f"KV_{bucket}")
    assert info["config"]["max_age"] == 0
    assert info["config"]["allow_msg_ttl"] is True
    assert (await t.kv_get(bucket, "kept")) is not None
    await t.kv_create(bucket, "short", b"1", ttl_s=TTL_S)
    await gone_within(t, bucket, "short", EXPIRY_BOUND_S)
    # The layout's inputs bucket is provisioned that way.
    inputs = await t.stream_info(f"KV_{INPUTS_BUCKET}")
    assert (inputs["config"]["max_age"], inputs["config"]["allow_msg_ttl"]) == (0, True)
