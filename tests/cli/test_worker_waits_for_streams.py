"""``dagnats worker`` started at the same moment as ``dagnats serve`` waits for the streams.

Found from outside: a script that started both at once saw the worker exit at once, "the
JetStream streams are missing", because serve had not provisioned them yet. A host that does
not provision now waits for them (``_host.wait_provisioned``, bounded, one log line), and its
worker starts once another process has provisioned the server.
"""

from __future__ import annotations

import logging

import pytest
import trio

from dagnats_trio._host import Host, HostConfig, _compose
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import NotProvisioned, open_nats_transport, provision
from dagnats_trio.worker import TaskContext

#: Bound of each of the test's waits (the host's line, its start once provisioned).
WAIT_S = 20.0
#: The shortened wait of the test of its end.
SHORT_WAIT_S = 0.5


async def _idle(tc: TaskContext) -> None:
    await tc.complete(None)


def _worker_only(url: str) -> HostConfig:
    """What ``dagnats worker`` hosts (cli/_processes.py)."""
    return HostConfig(
        nats_urls=(url,),
        provision=False,
        engine=False,
        listen=None,
        inputs_endpoints=False,
        handlers={"waits_for_streams": _idle},
    )


class _Said(logging.Handler):
    """Sets ``event`` when the host says it waits (logged from the test's own Trio thread)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.event = trio.Event()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self.event.set()


async def test_a_worker_host_waits_for_the_streams_and_starts_once_they_are_made(
    fresh_nats_server: NatsServer,
) -> None:
    said = _Said()
    logging.getLogger(_compose.__name__).addHandler(said)
    try:
        async with trio.open_nursery() as nursery:
            started = trio.Event()
            infos = []

            async def host() -> None:
                infos.append(await nursery.start(Host(_worker_only(fresh_nats_server.url)).run))
                started.set()

            nursery.start_soon(host)
            with trio.fail_after(WAIT_S):
                await said.event.wait()
            assert not started.is_set()  # waiting, not started and not exited
            assert len(said.lines) == 1 and "waiting up to" in said.lines[0], said.lines
            async with open_nats_transport(fresh_nats_server.url) as transport:
                await provision(transport)
            with trio.fail_after(WAIT_S):
                await started.wait()
            assert infos[0].worker is not None
            assert len(said.lines) == 1  # one line while waiting, not one per look
            nursery.cancel_scope.cancel()
    finally:
        logging.getLogger(_compose.__name__).removeHandler(said)


async def test_a_worker_host_gives_up_after_its_wait(
    fresh_nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_compose, "PROVISIONED_WAIT_S", SHORT_WAIT_S)
    # The host's nurseries wrap the error; the CLI finds it as their leaf ("streams are
    # missing", exit 1).
    with pytest.RaisesGroup(NotProvisioned, flatten_subgroups=True), trio.fail_after(WAIT_S):
        async with trio.open_nursery() as nursery:
            await nursery.start(Host(_worker_only(fresh_nats_server.url)).run)
