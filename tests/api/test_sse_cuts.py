"""Clients that vanish mid-stream: a TCP reset at any moment must cost the API nothing.

A follower of ``GET .../journal?follow=1`` is cut with a reset (``SO_LINGER`` 0) before the
response headers, right after them, or in the middle of an event, at a random moment each time.
Afterwards every NATS-backed route still answers and nothing the streams opened is left: the
transport's live subscriptions and the API's open sockets are back where they were.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import socket
import struct
from collections.abc import AsyncIterator, Callable

import pytest
import trio

from dagnats_trio.protocol import ModelRecord
from dagnats_trio.transport import (
    NatsTransport,
    TrioNatsTransport,
    open_nats_transport,
    provision,
)

from ._stack import IDLE_WORKFLOW, Stack, idle_run, open_stack, unique

#: How many follow requests are cut, and by how many clients at once.
CUTS = 500
CUT_LANES = 4
#: A cut lands at a random moment up to this long after its reference point.
CUT_JITTER_S = 0.02
#: Records in the followed journal, so a stream has events to cut in the middle of.
RECORDS = 60
#: Bound on one cut (connect, send, read what the moment needs).
CUT_BOUND_S = 10.0
#: Bound on the whole run of cuts.
ALL_CUTS_S = 300.0
#: Bound on the API letting go of what the cut streams held.
RELEASE_S = 20.0
#: Bound on a route's answer after the cuts.
ANSWER_S = 10.0
#: How often a count is looked at while waiting for it.
LOOK_EVERY_S = 0.05
SEED_ENV = "DAGNATS_CUT_SEED"
#: The state column of a listening socket in ``/proc/net/tcp``.
_TCP_LISTEN = "0A"

MOMENTS = ("request", "headers", "event")


def _api_sockets(port: int) -> int:
    """Open sockets of this process on the API's side of its connections (not the listener).

    A socket's inode appears in ``/proc/self/fd`` as ``socket:[inode]``; ``/proc/net/tcp`` names
    each socket's local port, state and inode.
    """
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            link = os.readlink(f"/proc/self/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[len("socket:[") : -1])
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] != _TCP_LISTEN and fields[9] in inodes:
                count += 1
    return count


def _reset(sock: trio.socket.SocketType) -> None:
    """Close with a TCP reset, as a killed client or a dropped proxy connection does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def _read_until(sock: trio.socket.SocketType, marker: bytes, have: bytes) -> bytes:
    while marker not in have:
        chunk = await sock.recv(4096)
        if not chunk:
            break
        have += chunk
    return have


async def cut_once(host: str, port: int, path: str, moment: str, rng: random.Random) -> bool:
    """One follower cut with a reset; True when no byte of the answer had arrived by then."""
    sock = trio.socket.socket()
    try:
        await sock.connect((host, port))
        await sock.send(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        if moment in ("headers", "event"):
            got = await _read_until(sock, b"\r\n\r\n", b"")
            assert got.startswith(b"HTTP/1.1 200"), got[:200]
            if moment == "event":
                # Into the body: a random number of bytes, usually inside an event.
                body = got.split(b"\r\n\r\n", 1)[1]
                want = rng.randint(1, 2_000)
                while len(body) < want:
                    chunk = await sock.recv(4096)
                    if not chunk:
                        break
                    body += chunk
        await trio.sleep(rng.uniform(0, CUT_JITTER_S))
        readable, _, _ = select.select([sock], [], [], 0)
        return moment == "request" and not readable
    finally:
        _reset(sock)


async def _wait_for(what: str, check: Callable[[], bool], bound_s: float) -> None:
    """Until ``check()`` holds, looked at every :data:`LOOK_EVERY_S`; fails after the bound.

    What is counted (descriptors, subscriptions) has no event of its own to wait on.
    """
    for _ in range(int(bound_s / LOOK_EVERY_S) + 1):
        if check():
            return
        await trio.sleep(LOOK_EVERY_S)
    raise AssertionError(f"{what} did not hold within {bound_s}s")


@pytest.fixture(params=["native", "nats-py"])
async def own_api(request: pytest.FixtureRequest, nats_url: str) -> AsyncIterator[Stack]:
    """A stack on a transport of its own, so its subscriptions are this test's alone; on each
    client (the first report was on nats-py: a cancelled flush broke its read loop)."""
    async with open_nats_transport(nats_url, name="pytest-cuts", client=request.param) as nats:
        await provision(nats)
        async with open_stack(nats, None) as stack:
            yield stack


async def _routes_answer(api: Stack, run_id: str) -> None:
    """The NATS-backed routes answer (reads, writes, the journal and inputs), and health is up."""
    with trio.fail_after(ANSWER_S):
        for path in (
            f"/runs/{run_id}",
            "/runs",
            "/workflows",
            f"/workflows/{IDLE_WORKFLOW}",
            f"/runs/{run_id}/steps/agent/journal",
        ):
            r = await api.client.get(path)
            assert r.status_code == 200, (path, r.status_code, r.text)
        r = await api.client.get(f"/runs/{run_id}/steps/agent/inputs/{unique('q')}")
        assert r.status_code == 404, r.text  # looked up in NATS, and not there
        r = await api.client.post(f"/runs/{run_id}/signal/poke", json={"payload": 1})
        assert r.status_code == 202, r.text
        r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW})
        assert r.status_code == 201, r.text
        r = await api.client.get("/healthz")
        assert (r.status_code, r.json()) == (200, {"status": "ok", "nats": "up"})


async def test_reset_followers_leave_the_api_whole(own_api: Stack) -> None:
    seed = int(os.environ.get(SEED_ENV, random.randrange(2**32)))
    print(f"cut seed {seed} (set {SEED_ENV} to repeat)")
    rng = random.Random(seed)
    transport = own_api.transport
    assert isinstance(transport, NatsTransport | TrioNatsTransport)
    run_id = await idle_run(own_api)
    for call in range(RECORDS):
        record = ModelRecord(
            iteration=0, attempt=1, claim_id="c1", call=call, response={"text": "x" * 200}
        )
        await own_api.append(run_id, "agent", record)
    await _routes_answer(own_api, run_id)
    host, port_text = own_api.url.removeprefix("http://").rsplit(":", 1)
    port = int(port_text)
    subs_before = transport.open_subscriptions
    sockets_before = _api_sockets(port)

    path = f"/runs/{run_id}/steps/agent/journal?follow=1"
    counts = dict.fromkeys(MOMENTS, 0)
    before_headers = [0]
    plan = [rng.choice(MOMENTS) for _ in range(CUTS)]
    lane_rngs = [random.Random(rng.random()) for _ in range(CUT_LANES)]

    async def lane(index: int) -> None:
        for moment in plan[index::CUT_LANES]:
            with trio.fail_after(CUT_BOUND_S):
                early = await cut_once(host, port, path, moment, lane_rngs[index])
            before_headers[0] += early
            counts[moment] += 1

    with trio.fail_after(ALL_CUTS_S):
        async with trio.open_nursery() as nursery:
            for index in range(CUT_LANES):
                nursery.start_soon(lane, index)
    print(f"cuts by moment: {counts}, {before_headers[0]} of them before any byte of the answer")
    assert before_headers[0] > 0
    assert sum(counts.values()) == CUTS

    await _wait_for(
        f"subscriptions back to {subs_before} (now {transport.open_subscriptions})",
        lambda: transport.open_subscriptions == subs_before,
        RELEASE_S,
    )
    await _wait_for(
        f"API sockets back to {sockets_before} (now {_api_sockets(port)})",
        lambda: _api_sockets(port) <= sockets_before,
        RELEASE_S,
    )
    print(
        f"after {CUTS} cuts: subscriptions {transport.open_subscriptions} "
        f"(before {subs_before}), API sockets {_api_sockets(port)} (before {sockets_before})"
    )
    await _routes_answer(own_api, run_id)
