"""The chaos soak on a 3-node cluster of the test's own, with the node faults of ``--cluster``:
a node SIGKILLed and restarted on its store, a node paused past an election timeout and
resumed, a node cut off by a partition (its routes held by the proxies of ``chaos/_proxy.py``,
its clients left on its side) and healed. Bounded: the first nine runs of the commit's schedule,
which give one fault of every kind (the three node kinds first), plus the random ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from chaos import (
    CLUSTER_KINDS,
    TcpProxy,
    draw_schedule,
    open_real_backend,
    real_config,
    soak,
    soak_seed,
)
from dagnats_trio._env import DEFAULT_ENV
from dagnats_trio.testing import NODE_KINDS, FaultKind

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
#: One coverage round of the cluster's nine kinds. Node faults run one at a time, each for
#: seconds plus the cluster's recovery, and runs wait for them: 18 runs took 83 s on this
#: loaded machine, nine take about half that.
CLUSTER_SOAK_RUNS = len(CLUSTER_KINDS)
#: Wall bound of the whole soak, cluster start included.
CLUSTER_SOAK_WALL_S = 240.0
#: Bound on the proxy test's waits.
PROXY_WAIT_S = 5.0
#: How long the proxy test checks that a cut link carries nothing.
SILENCE_S = 0.3


def test_cluster_schedule_gives_every_node_fault_first() -> None:
    plans = draw_schedule(11, CLUSTER_SOAK_RUNS, CLUSTER_KINDS)
    assert plans == draw_schedule(11, CLUSTER_SOAK_RUNS, CLUSTER_KINDS)
    assert [p.faults[0].kind for p in plans[: len(NODE_KINDS)]] == list(NODE_KINDS)
    assert {p.faults[0].kind for p in plans} == set(FaultKind)
    for plan in plans:
        for fault in plan.faults:
            if fault.kind in NODE_KINDS:
                assert fault.target is not None and fault.window_s > 0
    assert any(f.on_leader for p in draw_schedule(11, 60, CLUSTER_KINDS) for f in p.faults)
    with pytest.raises(ValueError, match="no weights"):
        draw_schedule(11, 3, ())


async def test_cluster_soak_with_node_faults(
    record_soak_summary: Callable[[str], None], caplog: pytest.LogCaptureFixture
) -> None:
    chosen = soak_seed(REPO)
    replay = f"just chaos --cluster --seed {chosen.seed} --runs {CLUSTER_SOAK_RUNS}"
    caplog.set_level(logging.CRITICAL, logger="dagnats_trio")
    config = real_config(chosen.seed, CLUSTER_SOAK_RUNS)
    started = time.perf_counter()
    with trio.fail_after(CLUSTER_SOAK_WALL_S):
        async with open_real_backend(cluster=True) as backend:
            result = await soak(config, backend, DEFAULT_ENV)
    wall_s = time.perf_counter() - started
    injected = " ".join(f"{k}={n}" for k, n in result.injected.items())
    summary = (
        f"cluster seed={chosen.seed}: {len(result.outcomes)} runs, "
        f"{len(result.violations)} violations, faults {injected}, slowest run "
        f"{result.slowest_run_s:.1f} s, wall {wall_s:.1f} s; {'; '.join(result.notes)}; "
        f"replay with: {replay}"
    )
    record_soak_summary(summary)
    assert result.ok, summary + "\n" + "\n".join(result.violations)
    assert [o.status for o in result.outcomes] == ["completed"] * CLUSTER_SOAK_RUNS, summary
    assert all(not o.problems for o in result.outcomes), summary
    assert all(dict(o.tool_starts)["send_message"] <= 1 for o in result.outcomes), summary
    for kind in NODE_KINDS:
        assert result.injected[kind.value] >= 1, (kind, summary)
    assert result.injected["kill"] >= 1 and result.injected["stall"] >= 1, summary
    assert any("not recovered within 60 s: 0" in n for n in result.notes), summary


async def _echo(stream: trio.SocketStream) -> None:
    async with stream:
        async for data in stream:
            await stream.send_all(data)


async def _receive(stream: trio.SocketStream, n: int) -> bytes:
    got = b""
    with trio.fail_after(PROXY_WAIT_S):
        while len(got) < n:
            got += await stream.receive_some(n - len(got))
    return got


async def test_proxy_cut_holds_bytes_and_new_links_until_healed() -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, _echo, 0)
        echo_port = listeners[0].socket.getsockname()[1]
        proxy = await nursery.start(TcpProxy("test", lambda: echo_port).run)
        a = await trio.open_tcp_stream("127.0.0.1", proxy.port)
        await a.send_all(b"one")
        assert await _receive(a, 3) == b"one"
        assert proxy.live == 1

        proxy.cut()
        assert proxy.is_cut
        await a.send_all(b"two")
        b = await trio.open_tcp_stream("127.0.0.1", proxy.port)  # accepted, carries nothing
        await b.send_all(b"new")
        with trio.move_on_after(SILENCE_S) as silent:
            await a.receive_some(10)
        assert silent.cancelled_caught
        with trio.move_on_after(SILENCE_S) as silent:
            await b.receive_some(10)
        assert silent.cancelled_caught and proxy.live == 1

        proxy.heal()
        assert await _receive(a, 3) == b"two"  # held, not lost
        assert await _receive(b, 3) == b"new"

        # Answers held: what the client sends arrives, what comes back waits for the heal.
        proxy.hold_answers()
        await a.send_all(b"ask")
        with trio.move_on_after(SILENCE_S) as silent:
            await a.receive_some(10)
        assert silent.cancelled_caught
        proxy.heal()
        assert await _receive(a, 3) == b"ask"

        # A cut of new links only: links already up go on (clients on the cut-off side).
        proxy.cut(existing=False)
        await a.send_all(b"old")
        assert await _receive(a, 3) == b"old"
        proxy.heal()
        await a.aclose()
        await b.aclose()
        nursery.cancel_scope.cancel()
