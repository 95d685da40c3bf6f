"""Every transport tells the ``max_payload`` its server announces, the bound a write is held to.

The engine bounds a run's snapshot by it (``engine.snapshot_max_bytes``): assumed to be nats-
server's default, a server configured smaller left a run whose snapshot was over its bound
retrying the save forever, and a larger one refused what it could hold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from dagnats_trio.nats import DEFAULT_MAX_PAYLOAD_BYTES
from dagnats_trio.protocol.layout import CHECKPOINTS_BUCKET, JOURNAL_STREAM, journal_subject
from dagnats_trio.server import NatsServer, open_nats_server
from dagnats_trio.transport import (
    TemporarilyUnavailable,
    Transport,
    TransportError,
    open_nats_transport,
    open_sim_transport,
    provision,
)

#: A ``max_payload`` a server may be configured with, a quarter of the default.
SMALL_MAX_PAYLOAD_BYTES = 256 * 1024


async def test_the_default_server_announces_the_default(
    transport: Transport, clock: object
) -> None:
    assert transport.max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES


@pytest.fixture
async def small_server() -> AsyncIterator[NatsServer]:
    async with open_nats_server(max_payload_bytes=SMALL_MAX_PAYLOAD_BYTES) as server:
        yield server


@pytest.mark.parametrize("client", ["native", "nats-py"])
async def test_a_configured_server_announces_its_own(small_server: NatsServer, client: str) -> None:
    async with open_nats_transport(small_server.url, client=client) as transport:  # type: ignore[arg-type]
        assert transport.max_payload_bytes == SMALL_MAX_PAYLOAD_BYTES


async def test_the_simulation_announces_its_setting() -> None:
    async with open_sim_transport(max_payload_bytes=SMALL_MAX_PAYLOAD_BYTES) as transport:
        assert transport.max_payload_bytes == SMALL_MAX_PAYLOAD_BYTES
        other = transport.server.connect()
        assert other.max_payload_bytes == SMALL_MAX_PAYLOAD_BYTES  # the server's, not the link's
        await other.aclose()


@pytest.mark.parametrize("client", ["native", "nats-py"])
async def test_a_write_over_the_servers_bound_is_refused_for_good(
    small_server: NatsServer, client: str
) -> None:
    """Refused as a plain :class:`TransportError`: nats-py's refusal was mapped to
    ``TemporarilyUnavailable``, which tells a caller a retry may succeed."""
    over = b"o" * (SMALL_MAX_PAYLOAD_BYTES + 1)
    async with open_nats_transport(small_server.url, client=client) as transport:  # type: ignore[arg-type]
        await provision(transport)
        subject = journal_subject("maxpayload", client)
        with pytest.raises(TransportError) as caught:
            await transport.publish(subject, over)
        assert not isinstance(caught.value, TemporarilyUnavailable)
        with pytest.raises(TransportError) as caught:
            await transport.kv_put(CHECKPOINTS_BUCKET, f"maxpayload.{client}", over)
        assert not isinstance(caught.value, TemporarilyUnavailable)
        assert await transport.get_last_msg(JOURNAL_STREAM, subject) is None  # nothing stored
        at_bound = b"a" * (SMALL_MAX_PAYLOAD_BYTES - 1024)
        seq = await transport.publish(subject, at_bound)
        assert (await transport.get_msg(JOURNAL_STREAM, seq)).data == at_bound
