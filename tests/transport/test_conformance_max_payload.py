"""Every transport tells the ``max_payload`` its server announces, the bound a write is held to.

The engine bounds a run's snapshot by it (``engine.snapshot_max_bytes``): assumed to be nats-
server's default, a server configured smaller left a run whose snapshot was over its bound
retrying the save forever, and a larger one refused what it could hold.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest

from dagnats_trio.nats import DEFAULT_MAX_PAYLOAD_BYTES
from dagnats_trio.protocol.layout import CHECKPOINTS_BUCKET, JOURNAL_STREAM, journal_subject
from dagnats_trio.server import NatsServer, open_nats_server
from dagnats_trio.transport import (
    BatchMsg,
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


#: The transports a write over the bound is refused on: the simulation configured as the server.
CLIENTS = ("sim", "native", "nats-py")


@pytest.fixture(params=CLIENTS)
async def small(request: pytest.FixtureRequest) -> AsyncIterator[Transport]:
    """A provisioned transport to a server whose ``max_payload`` is the small one."""
    if request.param == "sim":
        async with open_sim_transport(max_payload_bytes=SMALL_MAX_PAYLOAD_BYTES) as transport:
            await provision(transport)
            yield transport
        return
    async with (
        open_nats_server(max_payload_bytes=SMALL_MAX_PAYLOAD_BYTES) as server,
        open_nats_transport(server.url, client=request.param) as transport,
    ):
        await provision(transport)
        yield transport


def _refused_for_good(caught: pytest.ExceptionInfo[TransportError]) -> None:
    assert not isinstance(caught.value, TemporarilyUnavailable)


async def test_a_write_over_the_servers_bound_is_refused_for_good(small: Transport) -> None:
    """Refused as a plain :class:`TransportError`: nats-py's refusal was mapped to
    ``TemporarilyUnavailable``, which tells a caller a retry may succeed; the simulation took
    it and stored it."""
    over = b"o" * (SMALL_MAX_PAYLOAD_BYTES + 1)
    subject = journal_subject("maxpayload", "publish")
    with pytest.raises(TransportError) as caught:
        await small.publish(subject, over)
    _refused_for_good(caught)
    with pytest.raises(TransportError) as caught:
        await small.kv_put(CHECKPOINTS_BUCKET, "maxpayload.put", over)
    _refused_for_good(caught)
    with pytest.raises(TransportError) as caught:
        await small.kv_create(CHECKPOINTS_BUCKET, "maxpayload.create", over)
    _refused_for_good(caught)
    with pytest.raises(TransportError) as caught:
        await small.core_publish("maxpayload.core", over)  # core NATS is bounded the same
    _refused_for_good(caught)
    assert await small.get_last_msg(JOURNAL_STREAM, subject) is None  # nothing stored
    assert await small.kv_get(CHECKPOINTS_BUCKET, "maxpayload.put") is None
    assert await small.kv_get(CHECKPOINTS_BUCKET, "maxpayload.create") is None
    at_bound = b"a" * SMALL_MAX_PAYLOAD_BYTES  # no headers: the payload alone is counted
    seq = await small.publish(subject, at_bound)
    assert (await small.get_msg(JOURNAL_STREAM, seq)).data == at_bound
    await small.kv_put(CHECKPOINTS_BUCKET, "maxpayload.put", at_bound)
    entry = await small.kv_get(CHECKPOINTS_BUCKET, "maxpayload.put")
    assert entry is not None and entry.value == at_bound


@pytest.mark.parametrize("over_at", [0, 1])
async def test_a_batch_with_a_message_over_the_bound_stores_none(
    small: Transport, over_at: int
) -> None:
    """One message of an atomic batch over the bound (first or last) refuses the whole batch,
    for good; the same batch within the bound is stored whole."""
    subject = journal_subject("maxpayload", f"batch{over_at}")
    msgs = [BatchMsg(subject, b"small", msg_id=f"b{over_at}.1"), BatchMsg(subject, b"small")]
    msgs[over_at] = attrs.evolve(msgs[over_at], data=b"o" * (SMALL_MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(TransportError) as caught:
        await small.publish_batch(msgs, expected_last_subject_seq=0)
    _refused_for_good(caught)
    assert await small.get_last_msg(JOURNAL_STREAM, subject) is None
    fits = [attrs.evolve(m, data=b"f" * (SMALL_MAX_PAYLOAD_BYTES // 2)) for m in msgs]
    ack = await small.publish_batch(fits, expected_last_subject_seq=0)
    assert ack.last_seq - ack.first_seq == 1


async def test_headers_count_towards_the_bound(small: Transport) -> None:
    """nats-server bounds headers and payload together: a payload exactly at the bound is
    refused once a message id's header goes with it, in a batch too (its own headers). nats-py
    checks the payload alone: the server then closed the connection (Maximum Payload
    Violation), the call timed out and the next found the connection closed."""
    subject = journal_subject("maxpayload", "headers")
    at_bound = b"h" * SMALL_MAX_PAYLOAD_BYTES
    with pytest.raises(TransportError) as caught:
        await small.publish(subject, at_bound, msg_id="with-id")
    _refused_for_good(caught)
    with pytest.raises(TransportError) as caught:
        await small.publish(subject, at_bound, headers={"K": "v"})
    _refused_for_good(caught)
    with pytest.raises(TransportError) as caught:
        await small.publish_batch([BatchMsg(subject, at_bound)])
    _refused_for_good(caught)
    with pytest.raises(TransportError) as caught:
        await small.core_publish("maxpayload.core", at_bound, headers={"K": "v"})
    _refused_for_good(caught)
    assert await small.get_last_msg(JOURNAL_STREAM, subject) is None  # the connection serves
