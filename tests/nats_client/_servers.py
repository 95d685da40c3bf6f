"""nats-servers with options the shared fixtures do not set (auth, TLS), and a fake server."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from dagnats_trio.server import START_TIMEOUT_S, STOP_TIMEOUT_S, find_nats_server

#: Pause between probes of a starting server's port (the server package polls the same way).
PROBE_INTERVAL_S = 0.02


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@asynccontextmanager
async def nats_server_with(*args: str) -> AsyncIterator[int]:
    """A nats-server (no JetStream) started with extra command-line ``args``; yields its port."""
    port = free_port()
    command = [str(find_nats_server()), "-a", "127.0.0.1", "-p", str(port), *args]
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        with trio.fail_after(START_TIMEOUT_S):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                except OSError:
                    await trio.sleep(PROBE_INTERVAL_S)
                    continue
                await stream.aclose()
                break
        yield port
    finally:
        process.terminate()
        with trio.CancelScope(shield=True), trio.move_on_after(STOP_TIMEOUT_S) as scope:
            await process.wait()
        if scope.cancelled_caught:
            process.kill()


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1: (cert, key)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
