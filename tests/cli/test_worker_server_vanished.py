"""A ``dagnats worker`` whose server vanished waits for it, and stops cleanly on SIGTERM
(issue 16, item 4: it printed ``error: cannot listen on None: Connection lost``, rc 1)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Final

import pytest
import trio

from dagnats_trio.server import NatsServer
from dagnats_trio.transport import open_nats_transport, provision

from ._dev import dagnats_command

HERE: Final = Path(__file__).parent
#: Bound on the worker starting, noticing the outage, and stopping (a loaded machine).
WAIT_S: Final = 60.0
UNREACHABLE: Final = b"NATS is unreachable"


async def _read_until(stream: trio.abc.ReceiveStream, marker: bytes, seen: bytearray) -> None:
    while marker not in seen:
        chunk = await stream.receive_some()
        assert chunk, f"the stream ended before {marker!r}: {bytes(seen)!r}"
        seen += chunk


@pytest.mark.parametrize("client", ["native", "nats-py"])
async def test_sigterm_after_the_server_vanished_stops_cleanly(
    fresh_nats_server: NatsServer, client: str
) -> None:
    async with open_nats_transport(fresh_nats_server.url) as t:
        await provision(t)
    argv = [*dagnats_command(), "worker", "_workers:handlers", "--nats", fresh_nats_server.url]
    argv += ["--client", client]
    proc = await trio.lowlevel.open_process(
        argv, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    out, err = bytearray(), bytearray()
    try:
        with trio.fail_after(WAIT_S):
            await _read_until(proc.stdout, b"ready", out)
            await fresh_nats_server.stop_process()
            await _read_until(proc.stderr, UNREACHABLE, err)  # it noticed, and keeps waiting
            assert proc.poll() is None
            proc.send_signal(signal.SIGTERM)
            rc = await proc.wait()
            async for chunk in proc.stderr:
                err += chunk
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = err.decode()
    print(f"{client}: rc {rc}; stderr: {text!r}")
    assert rc == 0, text
    assert "SIGTERM: stopping" in text and text.rstrip().endswith("stopped")
    assert "error" not in text and "cannot listen" not in text
    assert text.count(UNREACHABLE.decode()) == 1
