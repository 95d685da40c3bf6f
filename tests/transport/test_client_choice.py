"""Which NATS client a transport runs on (issue 10 item 3): the native Trio client unless
nats-py is asked for, by argument, ``HostConfig.client``, ``--client`` or ``DAGNATS_CLIENT``."""

from __future__ import annotations

import uuid

import pytest

from dagnats_trio._host import HostConfig, HostSetupError, parse_nats_client
from dagnats_trio.transport import (
    DEFAULT_CLIENT,
    NatsTransport,
    Transport,
    TrioNatsTransport,
    open_nats_transport,
    parse_client,
    provision,
)
from dagnats_trio.transport._provision import BUCKETS


async def _kv_round_trip(transport: Transport, name: str) -> bytes | None:
    bucket = BUCKETS[0].name
    key = f"client-choice.{name}.{uuid.uuid4().hex}"
    revision = await transport.kv_create(bucket, key, name.encode())
    entry = await transport.kv_get(bucket, key)
    await transport.kv_delete(bucket, key, revision)
    return None if entry is None else entry.value


async def test_the_native_client_is_the_default_and_nats_py_is_one_argument_away(
    nats_url: str,
) -> None:
    assert DEFAULT_CLIENT == "native"
    async with open_nats_transport(nats_url, name="pytest-default") as default:
        assert isinstance(default, TrioNatsTransport)
        assert not isinstance(default, NatsTransport)
        await provision(default)
        assert await _kv_round_trip(default, "native") == b"native"
    async with open_nats_transport(nats_url, name="pytest-npy", client="nats-py") as npy:
        assert isinstance(npy, NatsTransport)
        assert await _kv_round_trip(npy, "nats-py") == b"nats-py"


def test_client_names_are_checked() -> None:
    assert parse_client(" Nats-Py ") == "nats-py"
    assert parse_client("native") == "native"
    for bad in ("asyncio", "", "nats_py"):
        with pytest.raises(ValueError, match="client must be one of native, nats-py, got"):
            parse_client(bad)
    with pytest.raises(HostSetupError, match="client must be one of native, nats-py"):
        parse_nats_client("bogus")
    assert HostConfig().client == "native"
    assert HostConfig(client="nats-py").client == "nats-py"
    with pytest.raises(HostSetupError, match="got 'bogus'"):
        HostConfig(client="bogus")  # type: ignore[arg-type]


async def test_a_bad_client_in_open_nats_transport_is_a_value_error(nats_url: str) -> None:
    with pytest.raises(ValueError, match="client must be one of"):
        async with open_nats_transport(nats_url, client="bogus"):  # type: ignore[arg-type]
            pass
