"""The matrix runs each test in its own cluster on its own server (a fresh nats-server, or a
fresh SimServer on the Trio clock), so the engines' shared consumer holds only this test's work."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

import pytest

from dagnats_trio.server import NatsServer
from dagnats_trio.transport import SimServer, Transport, open_nats_transport
from dagnats_trio.transport._trio_nats_connect import open_trio_nats_transport

from ._harness import Connect


@pytest.fixture
def nats_connect(fresh_nats_server: NatsServer) -> Connect:
    url = fresh_nats_server.url

    def connect() -> AbstractAsyncContextManager[Transport]:
        return open_nats_transport(url, name="matrix")

    return connect


@pytest.fixture
def trio_connect(fresh_nats_server: NatsServer) -> Connect:
    """The same server through TrioNatsTransport (the native client)."""
    url = fresh_nats_server.url

    def connect() -> AbstractAsyncContextManager[Transport]:
        return open_trio_nats_transport(url, name="matrix")

    return connect


@pytest.fixture
def sim_connect() -> Connect:
    return SimServer().connect
