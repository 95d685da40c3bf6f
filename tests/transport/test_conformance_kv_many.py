"""Conformance of ``kv_get_many`` (the batch read of a page's run snapshots) on SimTransport,
nats-py and the native client: present keys with the value and revision ``kv_get`` gives,
absent and deleted keys left out, more keys than one batch direct get takes, one round trip per
batch."""

from __future__ import annotations

from dagnats_trio.protocol.layout import CHECKPOINTS_BUCKET
from dagnats_trio.transport import MAX_LAST_MSGS_SUBJECTS, Transport

#: Keys of the large read: more than one batch direct get takes.
MANY_KEYS = MAX_LAST_MSGS_SUBJECTS + 6


async def test_kv_get_many_is_kv_get_of_each(transport: Transport, clock: object, uid: str) -> None:
    b = CHECKPOINTS_BUCKET
    await transport.kv_put(b, f"{uid}.a", b"one")
    await transport.kv_put(b, f"{uid}.a", b"two")
    await transport.kv_put(b, f"{uid}.b", b"bee")
    await transport.kv_put(b, f"{uid}.gone", b"x")
    await transport.kv_delete(b, f"{uid}.gone")
    keys = [f"{uid}.a", f"{uid}.b", f"{uid}.gone", f"{uid}.never", f"{uid}.a"]
    before = transport.round_trips
    got = await transport.kv_get_many(b, keys)
    assert transport.round_trips - before == 1
    assert set(got) == {f"{uid}.a", f"{uid}.b"}
    for key, entry in got.items():
        assert entry == await transport.kv_get(b, key)
    assert got[f"{uid}.a"].value == b"two"
    assert await transport.kv_get_many(b, []) == {}


async def test_kv_get_many_past_one_batch(transport: Transport, clock: object, uid: str) -> None:
    b = CHECKPOINTS_BUCKET
    keys = [f"{uid}.k{n}" for n in range(MANY_KEYS)]
    for n, key in enumerate(keys):
        if n % 2:
            await transport.kv_put(b, key, str(n).encode())
    before = transport.round_trips
    got = await transport.kv_get_many(b, keys)
    assert transport.round_trips - before == 2
    assert {k: e.value for k, e in got.items()} == {
        key: str(n).encode() for n, key in enumerate(keys) if n % 2
    }
