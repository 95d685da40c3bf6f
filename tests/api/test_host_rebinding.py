"""A DNS rebinding page cannot read or act through an open loopback API, on a served API.

Found from outside: with no token on a loopback bind (the default of ``dagnats dev``), a request
with ``Host: evil.example:8080`` - what a page of ``evil.example``, its name rebound to
``127.0.0.1``, sends - was served; the cross-origin rule does not see it, the page being
same-origin as far as the browser knows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from dagnats_trio.api._rest_host import guards_host, host_refusal
from dagnats_trio.transport import NatsTransport

from ._stack import ECHO_WORKFLOW, TOKEN, Stack, error_code, open_stack

FOREIGN_HOSTS = ["evil.example:8080", "evil.example", "10.0.0.1:8080", "localhost.evil.example"]


@pytest.fixture
async def loopback_api(nats_transport: NatsTransport) -> AsyncIterator[Stack]:
    async with open_stack(nats_transport, None, listen_host="127.0.0.1") as stack:
        yield stack


async def run_count(api: Stack, headers: dict[str, str] | None = None) -> int:
    r = await api.client.get("/runs", params={"limit": 1000}, headers=headers)
    assert r.status_code == 200, r.text
    return len(r.json()["runs"])


def start_body() -> bytes:
    return b'{"workflow": "%s"}' % ECHO_WORKFLOW.encode()


@pytest.mark.parametrize("host", FOREIGN_HOSTS)
async def test_a_foreign_host_is_refused_reads_and_writes(loopback_api: Stack, host: str) -> None:
    before = await run_count(loopback_api)
    r = await loopback_api.client.get("/runs", headers={"host": host})
    assert r.status_code == 403, r.text
    assert error_code(r) == "host_not_allowed"
    assert host in r.json()["error"]["message"]
    r = await loopback_api.client.post("/runs", content=start_body(), headers={"host": host})
    assert r.status_code == 403 and error_code(r) == "host_not_allowed", r.text
    assert await run_count(loopback_api) == before
    # Health tells nothing and stays open.
    r = await loopback_api.client.get("/healthz", headers={"host": host})
    assert r.status_code == 200, r.text


async def test_loopback_hosts_are_served(loopback_api: Stack) -> None:
    port = urlsplit(loopback_api.url).port
    hosts = [f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", "127.0.0.2", "[::1]:1"]
    before = await run_count(loopback_api)
    for host in hosts:
        r = await loopback_api.client.post("/runs", content=start_body(), headers={"host": host})
        assert r.status_code == 201, (host, r.text)
        r = await loopback_api.client.get("/ui/", headers={"host": host})
        assert r.status_code == 200, (host, r.text)
    assert await run_count(loopback_api) == before + len(hosts)


async def test_with_a_token_a_foreign_host_is_not_refused(nats_transport: NatsTransport) -> None:
    async with open_stack(nats_transport, TOKEN, listen_host="127.0.0.1") as stack:
        auth = {"authorization": f"Bearer {TOKEN}"}
        r = await stack.client.get("/runs", headers={**auth, "host": "evil.example:8080"})
        assert r.status_code == 200, r.text
        # the token still guards it
        r = await stack.client.get("/runs", headers={"host": "evil.example:8080"})
        assert r.status_code == 401 and error_code(r) == "unauthorized", r.text


async def test_on_a_bind_other_than_loopback_a_foreign_host_is_served(
    nats_transport: NatsTransport,
) -> None:
    async with open_stack(nats_transport, None, listen_host="0.0.0.0") as stack:
        r = await stack.client.get("/runs", headers={"host": "api.example.com"})
        assert r.status_code == 200, r.text


def test_the_rule() -> None:
    def refusal(host: str | None) -> str | None:
        return host_refusal([] if host is None else [(b"host", host.encode())])

    for served in ("localhost", "localhost:8080", "127.0.0.1", "127.9.9.9:1", "[::1]", "[::1]:80"):
        assert refusal(served) is None, served
    for refused in (
        "evil.example",
        "evil.example:80",
        "::1",
        "[::1]x",
        "127.0.0.1.evil.example",
        "0.0.0.0:8080",
        "[::]:8080",
        "localhost.",
        "",
        None,
    ):
        assert refusal(refused) is not None, refused
    assert guards_host("127.0.0.1", None)
    assert guards_host("::1", None)
    assert guards_host("localhost", None)
    assert not guards_host("127.0.0.1", TOKEN)
    assert not guards_host("0.0.0.0", None)
    assert not guards_host("192.168.1.5", None)
    assert not guards_host(None, None)
