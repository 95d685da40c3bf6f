"""Journal tests run on a real nats-server and on SimTransport."""

from __future__ import annotations

import pytest

from dagnats_trio.transport import Transport


@pytest.fixture(params=["nats", "sim"])
def transport(request: pytest.FixtureRequest) -> Transport:
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value
