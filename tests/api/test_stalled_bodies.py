"""Clients that stop sending mid-body neither hold the API nor hold their request for ever.

Found from outside against ``dagnats dev``: 70 connections that each sent ``POST /runs`` headers
and 5 bytes of a 100-byte body held every place the app works in (``REQUESTS_IN_FLIGHT``, 64: the
body was read inside the place), and ``GET /runs`` went unanswered for 20 s and more. Now a body
is read before its request takes a place, and a body that does not arrive within
``BODY_READ_TIMEOUT_S`` is answered 408 ``body_timeout``.
"""

from __future__ import annotations

import urllib.parse

import pytest
import trio

from dagnats_trio.api.rest import REQUESTS_IN_FLIGHT
from dagnats_trio.web import body as web_body

from ._stack import Stack

#: Bound of the answers the test waits for (the API is idle but for the stalled clients).
ANSWER_S = 10.0
#: The body deadline the 408 test runs with.
SHORT_BODY_TIMEOUT_S = 0.5
STALLED = (
    b"POST /runs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b'Content-Length: 100\r\n\r\n{"wor'
)


async def _connect(api: Stack) -> trio.SocketStream:
    url = urllib.parse.urlsplit(api.url)
    assert url.hostname is not None and url.port is not None
    return await trio.open_tcp_stream(url.hostname, url.port)


async def _answer_head(stream: trio.SocketStream) -> bytes:
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        head += chunk
    return head


async def test_stalled_bodies_do_not_hold_the_api(api: Stack) -> None:
    stalled = []
    try:
        for _ in range(REQUESTS_IN_FLIGHT + 6):
            stream = await _connect(api)
            await stream.send_all(STALLED)
            stalled.append(stream)
        with trio.fail_after(ANSWER_S):
            r = await api.client.get("/runs", params={"limit": 1})
        assert r.status_code == 200, r.text
        with trio.fail_after(ANSWER_S):
            r = await api.client.post("/runs", json={"workflow": "no-such-workflow"})
        assert r.status_code == 404, r.text
    finally:
        for stream in stalled:
            await stream.aclose()


async def test_a_body_that_stops_arriving_is_408(
    api: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_body, "BODY_READ_TIMEOUT_S", SHORT_BODY_TIMEOUT_S)
    stream = await _connect(api)
    try:
        await stream.send_all(STALLED)
        with trio.fail_after(ANSWER_S):
            head = await _answer_head(stream)
        assert head.startswith(b"HTTP/1.1 408"), head
    finally:
        await stream.aclose()
    # A whole body is read as before.
    r = await api.client.post("/runs", json={"workflow": "no-such-workflow"})
    assert r.status_code == 404, r.text
