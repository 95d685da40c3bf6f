"""A web page of another origin cannot act through the API (CSRF), on a served API.

Found from outside: with no token (the default on loopback), ``POST /runs`` with ``Content-Type:
text/plain`` and ``Origin: http://evil.example``, which any page may send without a preflight,
started a run; the same went for inputs and cancels.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from dagnats_trio.api._rest_origin import cross_origin_refusal

from ._stack import ECHO_WORKFLOW, TOKEN, Stack, error_code

EVIL = "http://evil.example"


async def run_count(api: Stack, headers: dict[str, str] | None = None) -> int:
    r = await api.client.get("/runs", params={"limit": 1000}, headers=headers)
    assert r.status_code == 200, r.text
    return len(r.json()["runs"])


def start_body() -> bytes:
    return b'{"workflow": "%s"}' % ECHO_WORKFLOW.encode()


@pytest.mark.parametrize(
    "headers",
    [
        {"origin": EVIL, "content-type": "text/plain"},
        {"origin": "null", "content-type": "text/plain"},
        {"sec-fetch-site": "cross-site", "origin": EVIL},
        # another port of the same host is the same site, but another origin
        {"sec-fetch-site": "same-site", "origin": "http://127.0.0.1:1"},
        {"sec-fetch-site": "cross-site"},
    ],
)
async def test_a_cross_origin_start_is_refused_and_stores_nothing(
    api: Stack, headers: dict[str, str]
) -> None:
    before = await run_count(api)
    r = await api.client.post("/runs", content=start_body(), headers=headers)
    assert r.status_code == 403, r.text
    assert error_code(r) == "cross_origin"
    assert "another" in r.json()["error"]["message"]
    assert await run_count(api) == before


async def test_browsers_on_the_same_origin_and_other_clients_go_through(api: Stack) -> None:
    host = urlsplit(api.url).netloc
    same = [
        {},  # curl, the CLI, the bridge's workers: no browser headers
        {"origin": f"http://{host}"},  # a browser without Sec-Fetch-Site, on this origin
        {"sec-fetch-site": "same-origin", "origin": f"http://{host}"},
        # behind a proxy that rewrites Host: the browser still says same-origin
        {"sec-fetch-site": "same-origin", "origin": "https://dagnats.example.com"},
        {"sec-fetch-site": "none"},
    ]
    before = await run_count(api)
    for headers in same:
        r = await api.client.post("/runs", content=start_body(), headers=headers)
        assert r.status_code == 201, (headers, r.text)
    assert await run_count(api) == before + len(same)
    # A read is never refused: the browser keeps its answer from the other page.
    r = await api.client.get("/runs", headers={"sec-fetch-site": "cross-site", "origin": EVIL})
    assert r.status_code == 200, r.text


async def test_a_token_does_not_let_another_origin_through(authed_api: Stack) -> None:
    auth = {"authorization": f"Bearer {TOKEN}"}
    before = await run_count(authed_api, auth)
    r = await authed_api.client.post(
        "/runs", content=start_body(), headers={**auth, "sec-fetch-site": "cross-site"}
    )
    assert r.status_code == 403 and error_code(r) == "cross_origin", r.text
    r = await authed_api.client.post("/runs", content=start_body(), headers=auth)
    assert r.status_code == 201, r.text
    assert await run_count(authed_api, auth) == before + 1


def test_the_rule_by_method_and_headers() -> None:
    def refusal(method: str, **headers: str) -> str | None:
        raw = [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]
        return cross_origin_refusal(method, raw)

    assert refusal("POST") is None
    assert refusal("DELETE", origin="http://a:1", host="a:1") is None
    assert refusal("POST", origin="HTTP://A:1", host="a:1") is None
    assert refusal("POST", sec_fetch_site="same-origin", origin=EVIL, host="a:1") is None
    for method in ("GET", "HEAD", "OPTIONS"):
        assert refusal(method, sec_fetch_site="cross-site", origin=EVIL) is None
    assert refusal("DELETE", origin=EVIL, host="a:1") is not None
    assert refusal("POST", origin="http://a:2", host="a:1") is not None
    assert refusal("POST", origin="null", host="a:1") is not None
    assert refusal("POST", origin=EVIL) is not None  # no Host at all
    assert refusal("POST", sec_fetch_site="same-site", origin="http://a:1", host="a:1") is not None
    message = refusal("POST", sec_fetch_site="cross-site")
    assert message is not None and "Sec-Fetch-Site" in message
