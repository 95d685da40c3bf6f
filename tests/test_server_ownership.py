"""What an embedded nats-server owns, and for how long (issue 9 items 7 and 8): its store
directory (one server per store, locked), its port (an asked-for port is never moved), and its
life (it dies with the process that started it, even one killed with SIGKILL)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio
from _procs import children_of, exit_watch, server_dir_of

from dagnats_trio.server import (
    LOCK_FILE_NAME,
    NatsServer,
    PortInUse,
    StoreLocked,
    SyncNatsServer,
    open_nats_server,
)
from dagnats_trio.server._probe import answers_info

TEST_BOUND_S = 30.0
#: How long a server may outlive its SIGKILLed parent (the kernel signals at once; a loaded
#: machine may take a while to schedule the exit).
PARENT_DEATH_BOUND_S = 10.0
#: Bound of the child script's start (imports, then a server).
SCRIPT_START_TIMEOUT_S = 30.0


def _proc_text(name: str) -> str:
    return Path(f"/proc/{name}").read_text()


def _threadchildren_of(tid: int) -> set[int]:
    return {int(p) for p in _proc_text(f"self/task/{tid}/children").split()}


def _open_files(pid: int) -> set[str]:
    """The paths a live process holds open; an fd closed between the listing and its readlink
    (the server opens and closes files as it runs) is simply not held."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            held.add(os.readlink(fd))
        except FileNotFoundError:
            continue
    return held


@contextmanager
def _listener(port: int = 0) -> Iterator[int]:
    """Someone else listening on a loopback port (0: any), for the duration of the block."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield sock.getsockname()[1]


async def test_a_second_server_on_one_store_is_refused_before_it_spawns(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with trio.fail_after(TEST_BOUND_S):
        async with open_nats_server(store_dir=store) as first:
            assert (store / LOCK_FILE_NAME).read_text().strip() == str(os.getpid())
            before = children_of(os.getpid())
            second = NatsServer(store_dir=store)
            with pytest.raises(StoreLocked) as refused:
                await second.start()
            assert refused.value.holder_pid == os.getpid()
            assert refused.value.directory == store
            assert "in use by another process" in str(refused.value)
            assert second.pid is None and not second.running
            assert children_of(os.getpid()) == before  # no second nats-server was spawned
            assert await answers_info(first.port)
            await first.restart()  # a restart keeps the lock: it is still this server's store
            with pytest.raises(StoreLocked):
                await NatsServer(store_dir=store).start()
        # Stopped: the store is free again, and the next server takes it.
        async with open_nats_server(store_dir=store) as again:
            assert await answers_info(again.port)


def test_the_lock_is_held_by_the_server_child_too(tmp_path: Path) -> None:
    """flock belongs to the open file: the child inherits it, so a parent gone while its server
    still runs does not free the store. Checked from another process, as a second dev would."""
    store = tmp_path / "store"
    probe = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(store / LOCK_FILE_NAME)!r}, os.O_RDWR)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError:\n"
        "    sys.exit(3)\n"
    )

    async def main() -> None:
        async with open_nats_server(store_dir=store) as server:
            assert server.pid is not None
            assert str(store / LOCK_FILE_NAME) in _open_files(server.pid)
            held = await trio.run_process([sys.executable, "-c", probe], check=False)
            assert held.returncode == 3

    trio.run(main)
    free = subprocess.run([sys.executable, "-c", probe], timeout=TEST_BOUND_S, check=False)
    assert free.returncode == 0


async def test_an_asked_for_port_is_never_moved(tmp_path: Path) -> None:
    with trio.fail_after(TEST_BOUND_S):
        with _listener() as taken:
            before = children_of(os.getpid())
            server = NatsServer(store_dir=tmp_path / "a", port=taken)
            with pytest.raises(PortInUse, match=f"port {taken} on 127.0.0.1 is already in use"):
                await server.start()
            assert children_of(os.getpid()) == before
            assert not server.running
        # A server on a port it was given, stopped, its port taken meanwhile: it does not move.
        async with open_nats_server(store_dir=tmp_path / "b") as picked:
            port = picked.port
        server = NatsServer(store_dir=tmp_path / "b", port=port)
        await server.start()
        try:
            await server.stop_process()
            with _listener(port), pytest.raises(PortInUse):
                await server.start()
        finally:
            await server.stop()


async def test_only_a_restart_of_a_server_that_picked_its_port_may_move() -> None:
    with trio.fail_after(TEST_BOUND_S):
        async with open_nats_server() as server:
            old = server.port
            await server.stop_process()
            with _listener(old):
                await server.start()
                assert server.port != old
                assert await answers_info(server.port)


async def test_the_server_is_a_child_of_the_thread_running_trio() -> None:
    """Its parent-death signal fires when the forking *thread* ends: forking in one of Trio's
    worker threads (as ``trio.lowlevel.open_process`` does) would kill the server once that
    thread sat idle for a few seconds. Linux lists children per thread."""
    with trio.fail_after(TEST_BOUND_S):
        async with open_nats_server() as server:
            tid = threading.get_native_id()
            assert server.pid in _threadchildren_of(tid)
            assert f"PPid:\t{os.getpid()}" in _proc_text(f"{server.pid}/status")


_SCRIPT = """
import sys, time, trio
from dagnats_trio.server import SyncNatsServer, open_nats_cluster, open_nats_server

if sys.argv[1] == "sync":
    print("ready", SyncNatsServer().start(), flush=True)
    time.sleep(600)
elif sys.argv[1] == "cluster":
    async def main():
        async with open_nats_cluster() as cluster:
            print("ready", *cluster.urls, flush=True)
            await trio.sleep_forever()
    trio.run(main)
else:
    async def main():
        async with open_nats_server() as server:
            print("ready", server.url, flush=True)
            await trio.sleep_forever()
    trio.run(main)
"""
#: Servers each kind starts: the test fixtures' blocking server, ``open_nats_server`` (what
#: ``dev`` and ``demo`` embed) and the fixtures' 3-node cluster.
KIND_SERVERS = {"sync": 1, "open_nats_server": 1, "cluster": 3}


def _answers(url: str) -> bool:
    host, _, port = url.removeprefix("nats://").rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


@pytest.mark.parametrize("kind", sorted(KIND_SERVERS))
def test_the_server_dies_with_a_parent_killed_by_sigkill(kind: str) -> None:
    """Every server, its port and (at the next start of any server) its temporary directories
    go with a parent that ran no cleanup."""
    parent = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT, kind], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        started, _, _ = select.select([parent.stdout], [], [], SCRIPT_START_TIMEOUT_S)
        word, *urls = parent.stdout.readline().split() if started else [""]
        assert word == "ready"
        servers = children_of(parent.pid)
        assert len(servers) == len(urls) == KIND_SERVERS[kind]
        dirs = {server_dir_of(pid) for pid in servers}
        assert all(str(parent.pid) in d.name for d in dirs)  # named by their owner
        with contextlib.ExitStack() as watches:
            exits = [watches.enter_context(exit_watch(pid)) for pid in servers]
            assert not any(exited(0) for exited in exits)
            parent.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            for exited in exits:
                assert exited(PARENT_DEATH_BOUND_S), "a server outlived its parent"
            gone_s = time.monotonic() - killed_at
        assert parent.wait(TEST_BOUND_S) == -signal.SIGKILL
        assert not any(_answers(url) for url in urls)
        print(f"\n{kind}: {len(servers)} server(s) gone {gone_s * 1000:.0f} ms after SIGKILL")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    # Nobody cleaned up after the parent; the next server started on this machine does.
    nxt = SyncNatsServer()
    nxt.start()
    nxt.stop()
    assert not any(d.exists() for d in dirs), "a dead parent's temporary directory stayed"
    assert not list(Path(tempfile.gettempdir()).glob(f"dagnats-*-{parent.pid}-*"))
