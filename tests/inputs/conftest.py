"""Fixtures for the inputs tests: one ``transport`` fixture run on a real server and on the sim."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dagnats_trio.transport import Transport, open_nats_transport, open_sim_transport, provision


@pytest.fixture(params=["nats", "sim"])
async def transport(request: pytest.FixtureRequest, nats_url: str) -> AsyncIterator[Transport]:
    """A provisioned transport: the session nats-server, then SimTransport."""
    if request.param == "nats":
        async with open_nats_transport(nats_url, name="pytest-inputs") as nats:
            await provision(nats)
            yield nats
    else:
        async with open_sim_transport() as sim:
            await provision(sim)
            yield sim
