"""Fixtures of the journal tests."""

from __future__ import annotations

import pytest

from dagnats_trio.transport import Transport


@pytest.fixture(params=["nats", "trio", "sim"])
def any_transport(request: pytest.FixtureRequest) -> Transport:
    """The nats-py and the native transport on the session nats-server, and SimTransport."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value
