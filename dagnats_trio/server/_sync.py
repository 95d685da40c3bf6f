"""A blocking twin of :class:`NatsServer` for places without a Trio run (session fixtures).

It writes the same config file through the same code, so tests run against the server the
library embeds.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import final

from ._binary import NatsServerError, find_nats_server
from ._child import die_with_parent_preexec
from ._config import (
    LOOPBACK,
    NodeConfig,
    command,
    log_tail,
    port_of,
    read_client_url,
    render_config,
)
from ._node import READY_POLL_INTERVAL_S, START_TIMEOUT_S, STOP_TIMEOUT_S
from ._tempdir import NODE_DIR_PREFIX, owned_temp_dir

#: Bound on one blocking connect/read while probing readiness.
_SOCKET_TIMEOUT_S = 1.0


@final
class SyncNatsServer:
    """Start with :meth:`start`, stop with :meth:`stop`; JetStream on a temporary store.

    The child dies with the thread that called :meth:`start` (parent-death signal, see
    ``_child``): a test run killed with SIGKILL leaves no server behind.
    """

    def __init__(self, *, sync_always: bool = True) -> None:
        self._sync_always = sync_always
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        if self._url is None:
            raise NatsServerError("nats-server is not running")
        return self._url

    @property
    def store_dir(self) -> Path:
        if self._dir is None:
            raise NatsServerError("nats-server is not running")
        return self._dir / "store"

    def start(self) -> str:
        if self._process is not None:
            raise NatsServerError("nats-server is already running")
        self._dir = owned_temp_dir(NODE_DIR_PREFIX)
        ports_dir = self._dir / "ports"
        ports_dir.mkdir()
        config_file = self._dir / "nats-server.conf"
        config_file.write_text(
            render_config(NodeConfig(store_dir=self.store_dir, sync_always=self._sync_always))
        )
        log_file = self._dir / "nats-server.log"
        with log_file.open("ab") as log:
            self._process = subprocess.Popen(
                command(find_nats_server(), config_file, ports_dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent_preexec(),
            )
        try:
            self._url = self._wait_ready(ports_dir, log_file)
        except BaseException:
            self.stop()
            raise
        return self._url

    def _wait_ready(self, ports_dir: Path, log_file: Path) -> str:
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with {self._process.returncode}; log:\n"
                    + log_tail(log_file)
                )
            url = read_client_url(ports_dir, self._process.pid)
            if url is not None and _answers_info(port_of(url)):
                return f"nats://{LOOPBACK}:{port_of(url)}"
            time.sleep(READY_POLL_INTERVAL_S)
        raise NatsServerError(
            f"nats-server did not answer within {START_TIMEOUT_S}s; log:\n" + log_tail(log_file)
        )

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._url = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None


def _answers_info(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=_SOCKET_TIMEOUT_S) as sock:
            return sock.recv(5) == b"INFO "
    except OSError:
        return False
