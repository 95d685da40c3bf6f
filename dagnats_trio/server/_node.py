"""One nats-server child process, Trio-native."""

from __future__ import annotations

import shutil
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import IO, final

import trio

from . import _probe
from ._binary import NatsServerError, find_nats_server
from ._child import ServerProcess
from ._config import (
    ANY_PORT,
    LOOPBACK,
    ClusterSettings,
    NodeConfig,
    command,
    log_tail,
    port_is_free,
    port_of,
    read_client_url,
    render_config,
)
from ._lock import StoreLock
from ._tempdir import NODE_DIR_PREFIX, owned_temp_dir

#: How long a server may take from spawn to answering on its client port.
START_TIMEOUT_S = 15.0
#: How long a server may take to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 10.0
#: Pause between readiness probes while a server starts.
READY_POLL_INTERVAL_S = 0.01


@final
class PortInUse(NatsServerError):
    """The port asked for is taken; an asked-for port is never swapped for another."""

    def __init__(self, port: int) -> None:
        self.port = port
        super().__init__(f"port {port} on {LOOPBACK} is already in use")


@final
class NatsServer:
    """A nats-server child process with JetStream, on a loopback port it picks itself.

    ``store_dir`` defaults to a temporary directory removed by :meth:`stop`. :meth:`restart` keeps
    the store and asks for the same port, so connected clients reconnect to the same URL.
    ``sync_always`` (default on) makes the store fsync every publish: a single server has no
    replica to fall back on, so an acknowledged journal record must be on disk.

    The store directory is locked (:class:`StoreLock`) from the first :meth:`start` to
    :meth:`stop`, restarts included: a second server on the same store fails with
    :class:`StoreLocked` before it spawns. A ``port`` given is kept or the start fails
    (:class:`PortInUse`); only a server on a port it picked itself may move to a new free one
    when its old port was taken while it was stopped. The child gets a parent-death signal, so
    it never outlives this process (see ``_child``).
    """

    def __init__(
        self,
        *,
        store_dir: Path | str | None = None,
        sync_always: bool = True,
        binary: Path | None = None,
        server_name: str | None = None,
        cluster: ClusterSettings | None = None,
        port: int = ANY_PORT,
        max_payload_bytes: int | None = None,
    ) -> None:
        self._binary = binary
        self._max_payload_bytes = max_payload_bytes
        self._given_store = Path(store_dir) if store_dir is not None else None
        self._sync_always = sync_always
        self._server_name = server_name
        self._cluster = cluster
        self._port = port
        self._work_dir: Path | None = None
        self._process: ServerProcess | None = None
        self._url: str | None = None
        self._log: IO[bytes] | None = None
        self._lock: StoreLock | None = None

    # --- state -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>`` while running."""
        if self._url is None or self._process is None:
            raise NatsServerError("nats-server is not running")
        return self._url

    @property
    def last_url(self) -> str:
        """The URL of the running server, or of the last run (a restart asks for that port)."""
        if self._url is None:
            raise NatsServerError("nats-server was never started")
        return self._url

    @property
    def port(self) -> int:
        return port_of(self.last_url)

    @property
    def store_dir(self) -> Path:
        if self._given_store is not None:
            return self._given_store
        return self._dir() / "store"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _dir(self) -> Path:
        if self._work_dir is None:
            self._work_dir = owned_temp_dir(NODE_DIR_PREFIX)
        return self._work_dir

    @property
    def log_file(self) -> Path:
        return self._dir() / "nats-server.log"

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Spawn the server and return once it answers; kills it again if this is cancelled."""
        if self._process is not None:
            raise NatsServerError("nats-server is already running")
        first_start = self._url is None
        port = self._port if first_start else port_of(self.last_url)
        # Only a restart of a server that picked its own port may move (the old one was taken
        # meanwhile, and a new one beats not starting at all); a port the caller chose may not.
        may_move = not first_start and self._port == ANY_PORT
        try:
            if self._lock is None:
                self._lock = StoreLock.acquire(self.store_dir)
            if port != ANY_PORT and not port_is_free(port):
                if not may_move:
                    raise PortInUse(port)
                port = ANY_PORT
            try:
                await self._spawn(port)
            except NatsServerError:
                if not may_move or port == ANY_PORT:
                    raise
                await self._spawn(ANY_PORT)
        except BaseException:
            if first_start:  # nothing worth keeping: free the store, remove the temp directory
                await self.stop()
            raise

    async def _spawn(self, port: int) -> None:
        assert self._lock is not None
        work = self._dir()
        ports_dir = work / "ports"
        ports_dir.mkdir(exist_ok=True)
        config_file = work / "nats-server.conf"
        config = NodeConfig(
            store_dir=self.store_dir,
            port=port,
            sync_always=self._sync_always,
            server_name=self._server_name,
            cluster=self._cluster,
            max_payload_bytes=self._max_payload_bytes,
        )
        config_file.write_text(render_config(config))
        binary = self._binary or find_nats_server()
        if not binary.is_file():
            raise NatsServerError(f"nats-server binary {binary} does not exist")
        self._log = self.log_file.open("ab")
        try:
            await trio.lowlevel.checkpoint()
            # Forked here, in the thread running Trio, not in a worker thread: see ``_child``.
            # The child holds the store lock too, until it exits.
            self._process = ServerProcess.spawn(
                command(binary, config_file, ports_dir),
                log=self._log,
                pass_fds=(self._lock.fileno,),
            )
            with trio.fail_after(START_TIMEOUT_S):
                self._url = await self._wait_ready(ports_dir)
        except BaseException as exc:
            await self._terminate()
            if isinstance(exc, trio.TooSlowError):
                raise NatsServerError(
                    f"nats-server did not answer within {START_TIMEOUT_S}s; log:\n"
                    + log_tail(self.log_file)
                ) from None
            raise

    async def _wait_ready(self, ports_dir: Path) -> str:
        assert self._process is not None
        while True:
            if self._process.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with {self._process.returncode}; log:\n"
                    + log_tail(self.log_file)
                )
            url = read_client_url(ports_dir, self._process.pid)
            if url is not None and await _probe.answers_info(port_of(url)):
                return f"nats://{LOOPBACK}:{port_of(url)}"
            await trio.sleep(READY_POLL_INTERVAL_S)

    async def _terminate(self) -> None:
        """SIGTERM, a bounded wait, then SIGKILL; runs to the end even when cancelled."""
        process, self._process = self._process, None
        with trio.CancelScope(shield=True):
            if process is not None and process.returncode is None:
                with suppress(ProcessLookupError):
                    process.send_signal(signal.SIGCONT)  # a paused server cannot stop
                    process.send_signal(signal.SIGTERM)
                with trio.move_on_after(STOP_TIMEOUT_S):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            if self._log is not None:
                self._log.close()
                self._log = None

    async def stop_process(self) -> None:
        """Stop the process but keep the store and the port for a later :meth:`start`."""
        await self._terminate()

    async def kill_process(self) -> None:
        """SIGKILL the process, as a crashed host would leave it: no shutdown, nothing flushed
        beyond what was already written. Store and port are kept for a later :meth:`start`."""
        process, self._process = self._process, None
        with trio.CancelScope(shield=True):
            if process is not None:
                if process.returncode is None:
                    with suppress(ProcessLookupError):
                        process.kill()
                await process.wait()
            if self._log is not None:
                self._log.close()
                self._log = None

    def pause(self) -> None:
        """SIGSTOP the process: it holds its connections and answers nothing until
        :meth:`resume` (a stalled host, a zombie leader)."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a process paused by :meth:`pause`."""
        self._signal(signal.SIGCONT)

    def _signal(self, sig: signal.Signals) -> None:
        if self._process is None or self._process.returncode is not None:
            raise NatsServerError("nats-server is not running")
        self._process.send_signal(sig)

    async def stop(self) -> None:
        """Stop the server, free its store's lock and remove its temporary directories."""
        await self._terminate()
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self._url = None
        if self._work_dir is not None:
            shutil.rmtree(self._work_dir, ignore_errors=True)
            self._work_dir = None

    async def restart(self) -> None:
        """Stop and start again on the same store (and the same port when it is still free)."""
        await self._terminate()
        await self.start()

    async def run(
        self, *, task_status: trio.TaskStatus[NatsServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run until cancelled: ``server = await nursery.start(NatsServer().run)``."""
        await self.start()
        try:
            task_status.started(self)
            await trio.sleep_forever()
        finally:
            await self.stop()


@asynccontextmanager
async def open_nats_server(
    *,
    store_dir: Path | str | None = None,
    sync_always: bool = True,
    binary: Path | None = None,
    max_payload_bytes: int | None = None,
) -> AsyncIterator[NatsServer]:
    """A running single nats-server for the duration of the block; ``max_payload_bytes``
    configures the bound it announces (None: the server's default)."""
    server = NatsServer(
        store_dir=store_dir,
        sync_always=sync_always,
        binary=binary,
        max_payload_bytes=max_payload_bytes,
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
