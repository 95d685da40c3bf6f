"""Fixtures of the console's browser tests (see :mod:`._browser`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dagnats_trio.server import NatsServer

from ._browser import ConsoleStack, ensure_chromium, open_console_stack


@pytest.fixture(scope="session")
def chromium() -> None:
    """Debian's chromium, installed by scripts/install-browser when missing (or a failure)."""
    ensure_chromium()


@pytest.fixture
async def console(chromium: None, fresh_nats_server: NatsServer) -> AsyncIterator[ConsoleStack]:
    async with open_console_stack(fresh_nats_server) as stack:
        yield stack
