"""Serving: port 0 reports the real address, shutdown is clean, and no trace reaches a client."""

from __future__ import annotations

import logging

import httpx
import pytest
import trio

from dagnats_trio.api import Service
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.engine import RunSnapshot
from dagnats_trio.inputs import InputsService
from dagnats_trio.transport import NatsTransport

SERVER_WAIT_S = 10.0
SECRET = "secret-detail-do-not-leak"


class BrokenService(Service):
    async def get_run(self, run_id: str) -> RunSnapshot:
        raise RuntimeError(SECRET)


async def test_port_zero_serves_on_the_reported_url_and_shuts_down(
    nats_transport: NatsTransport,
) -> None:
    app = create_app(Service(nats_transport), InputsService(nats_transport), nats_transport)
    server = ApiServer(app, "127.0.0.1", 0)
    with trio.fail_after(SERVER_WAIT_S):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(server.run)
            assert url == server.url
            assert url.startswith("http://127.0.0.1:")
            assert not url.endswith(":0")
            async with httpx.AsyncClient(base_url=url) as client:
                r = await client.get("/healthz")
                assert r.status_code == 200
            server.shutdown()
    # The nursery exited on its own: shutdown() stopped the server.
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(base_url=url) as client:
            await client.get("/healthz")


async def test_unexpected_error_is_500_without_details(
    nats_transport: NatsTransport, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(BrokenService(nats_transport), InputsService(nats_transport), nats_transport)
    with trio.fail_after(SERVER_WAIT_S):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(ApiServer(app, "127.0.0.1", 0).run)
            async with httpx.AsyncClient(base_url=url) as client:
                with caplog.at_level(logging.ERROR, logger="dagnats_trio.api.rest"):
                    r = await client.get("/runs/r1")
                    journal = await client.get("/runs/r1/steps/s/journal")
                # The server is still serving after the failure.
                assert (await client.get("/healthz")).status_code == 200
            nursery.cancel_scope.cancel()
    for response in (r, journal):
        assert response.status_code == 500
        assert response.json() == {"error": {"code": "internal", "message": "internal error"}}
        assert SECRET not in response.text
        assert "Traceback" not in response.text
    assert any(SECRET in (rec.exc_text or "") or rec.exc_info for rec in caplog.records)


async def test_the_listen_address_is_logged_once(
    nats_transport: NatsTransport, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Service(nats_transport), InputsService(nats_transport), nats_transport)
    caplog.set_level(logging.INFO)
    with trio.fail_after(SERVER_WAIT_S):
        async with trio.open_nursery() as nursery:
            server = ApiServer(app, "127.0.0.1", 0)
            url = await nursery.start(server.run)
            server.shutdown()
    port = url.rsplit(":", 1)[1]
    mentions = [r.getMessage() for r in caplog.records if f":{port}" in r.getMessage()]
    assert mentions == [f"REST API listening on {url}"]
