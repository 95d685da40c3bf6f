"""Fixtures of the bridge tests; the stack itself is in :mod:`._stack`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dagnats_trio.transport import NatsTransport

from ._stack import TOKEN, Stack, open_stack


@pytest.fixture
async def stack(nats_transport: NatsTransport) -> AsyncIterator[Stack]:
    async with open_stack(nats_transport) as s:
        yield s


@pytest.fixture
async def authed_stack(nats_transport: NatsTransport) -> AsyncIterator[Stack]:
    async with open_stack(nats_transport, token=TOKEN) as s:
        yield s
