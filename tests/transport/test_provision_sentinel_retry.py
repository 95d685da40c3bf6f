"""Provisioning stores each sentinel once even when the server fails it transiently: a stream
just created with replicas may have no leader yet (the cluster soak once saw provisioning
refused with ``TemporarilyUnavailable`` on ``sentinel.RUN_ACTIVE``), and a publish's answer may
be lost after the sentinel was stored."""

from __future__ import annotations

import trio
from trio.testing import MockClock

from dagnats_trio.protocol.layout import SENTINEL_STREAMS, sentinel_subject
from dagnats_trio.transport import SimTransport, open_sim_transport, provision


async def _sentinels(sim: SimTransport) -> dict[str, list[int]]:
    """The sequences of each sentinel stream's sentinels (one each when provisioning is right)."""
    found = {}
    for stream in SENTINEL_STREAMS:
        msgs = await sim.read_subject(stream, sentinel_subject(stream), 1, 10)
        found[stream] = [m.seq for m in msgs]
    return found


async def test_a_sentinel_whose_answer_was_lost_is_stored_once(autojump_clock: MockClock) -> None:
    async with open_sim_transport() as sim:
        sim.faults.lose_next_publish_acks(1, subject="sentinel.>")
        await provision(sim)
        assert sim.faults.lose_publish_acks == 0  # the fault fired
        stored = await _sentinels(sim)
    assert all(len(seqs) == 1 for seqs in stored.values()), stored


async def test_a_sentinel_refused_while_the_stream_has_no_leader_is_stored_once(
    autojump_clock: MockClock,
) -> None:
    async with open_sim_transport() as sim:
        # Every JetStream call is refused for a moment, as while a new replicated stream (or
        # the cluster's meta group) elects its leader; provisioning again runs the same calls.
        await provision(sim)
        sim.faults.unavailable_until = trio.current_time() + 0.5
        with trio.fail_after(30):
            await provision(sim)
        stored = await _sentinels(sim)
    assert all(len(seqs) == 1 for seqs in stored.values()), stored
