"""Fixtures of the conformance suite: every case runs once per transport.

``transport`` hands out the shared ``sim_transport`` / ``nats_transport`` fixtures of
``tests/conftest.py``. ``clock`` must be requested by every conformance test: it is an
autojumping ``MockClock`` for the simulation (so AckWaits pass instantly) and the real clock for
nats-server, and pytest-trio only picks a clock up from a test's own arguments.
"""

from __future__ import annotations

import itertools
import secrets

import pytest
from trio.testing import MockClock

from dagnats_trio.transport import Transport

BACKENDS = ("sim", "nats", "trio")
_ids = itertools.count()
_SESSION = secrets.token_hex(3)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def clock(backend: str) -> MockClock | None:
    return MockClock(autojump_threshold=0) if backend == "sim" else None


@pytest.fixture
def transport(request: pytest.FixtureRequest, backend: str) -> Transport:
    # pytest-trio resolves an async fixture's value when the test starts, so handing on what
    # getfixturevalue returns is how one fixture picks another by parameter (and only the
    # chosen transport is opened).
    value: Transport = request.getfixturevalue(f"{backend}_transport")
    return value


@pytest.fixture
def uid(backend: str) -> str:
    """A token unique to this test in this session: the real server is shared by all tests."""
    return f"{backend}{_SESSION}{next(_ids)}"
