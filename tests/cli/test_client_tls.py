"""The verbs' API client builds TLS only when a request can meet it (issue 12, the CLI's first
seconds): loading the trusted roots is the costliest step of building a client, and every verb
builds one, most against a plain ``http://`` API.

An http API gets a context that trusts no root, so a connection that did meet TLS fails its
check instead of passing unchecked; an https API, or a proxy from the environment that is not
plain http, gets httpx's own verifying context as before.
"""

from __future__ import annotations

import ssl

import pytest
import trio

from dagnats_trio.cli import ApiClient, CannotConnect
from dagnats_trio.cli._client import _tls_verify

#: Proxy variables cleared for the cases that expect none (urllib reads them per call).
PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "HTTP://api.example:80/base"])
def test_an_http_api_gets_a_context_that_trusts_nothing(url: str, no_proxies: None) -> None:
    ctx = _tls_verify(url)
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert ctx.cert_store_stats()["x509_ca"] == 0  # no root: any TLS met fails its check


@pytest.mark.parametrize("url", ["https://api.example", "HTTPS://127.0.0.1:1", "http://[::1"])
def test_https_or_an_unparsed_url_takes_httpx_verifying_context(url: str, no_proxies: None) -> None:
    assert _tls_verify(url) is True


@pytest.mark.parametrize("proxy", ["https://proxy.example:3128", "socks5://proxy.example:1080"])
def test_a_proxy_that_is_not_plain_http_keeps_the_verifying_context(
    proxy: str, no_proxies: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", proxy)
    assert _tls_verify("http://127.0.0.1:8000") is True


def test_a_plain_http_proxy_needs_no_tls(no_proxies: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    assert isinstance(_tls_verify("http://127.0.0.1:8000"), ssl.SSLContext)


async def test_the_http_client_still_talks_and_still_says_cannot_connect(
    no_proxies: None,
) -> None:
    """The client built with that context reaches nothing on a closed port, and says so as
    before (exit code 4, not a TLS error)."""
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        async with ApiClient(f"http://127.0.0.1:{port}") as api:
            with pytest.raises(CannotConnect, match="cannot connect to the API") as err:
                await api.health()
    assert err.value.exit_code == 4
