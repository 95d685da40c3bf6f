"""Fixtures of the REST tests; the stack itself is in :mod:`._stack`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dagnats_trio.transport import (
    NatsTransport,
    open_nats_transport,
    open_sim_transport,
    provision,
)

from ._stack import TOKEN, Stack, open_stack


@pytest.fixture
async def api(nats_transport: NatsTransport) -> AsyncIterator[Stack]:
    async with open_stack(nats_transport, None) as stack:
        yield stack


@pytest.fixture(params=["nats", "sim"])
async def any_api(request: pytest.FixtureRequest, nats_url: str) -> AsyncIterator[Stack]:
    """The stack on the session nats-server, then on SimTransport (for the journal reader,
    whose live delivery must work with and without core wake-ups)."""
    if request.param == "nats":
        async with open_nats_transport(nats_url, name="pytest-api") as nats:
            await provision(nats)
            async with open_stack(nats, None) as stack:
                yield stack
    else:
        async with open_sim_transport() as sim:
            await provision(sim)
            async with open_stack(sim, None) as stack:
                yield stack


@pytest.fixture
async def authed_api(nats_transport: NatsTransport) -> AsyncIterator[Stack]:
    async with open_stack(nats_transport, TOKEN) as stack:
        yield stack
