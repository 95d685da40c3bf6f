"""An answer given before the request's body was read says ``Connection: close``.

The server closes such a connection (the rest of the body is still on it). Found from outside
against ``dagnats dev``: after a 413 (and a 401, 404 or 405 to a request with a body) the answer
did not say so, a client kept the connection for its next request, and that request failed
("Server disconnected without sending a response"). Raw HTTP/1.1 on one TCP connection here, so
what the client is told is what is checked.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import trio

from ._stack import TEST_MAX_BODY_BYTES, Stack

#: Bound on one exchange with the served API.
EXCHANGE_S = 10.0


async def exchange(stream: trio.SocketStream, request: bytes) -> tuple[int, dict[str, str]]:
    """Send ``request``; the status and headers of the answer, whose body is read in full."""
    await stream.send_all(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        assert chunk, ("closed before an answer", data)
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = await stream.receive_some()
        assert chunk, "closed inside the answer's body"
        rest += chunk
    return int(lines[0].split()[1]), headers


def post(path: str, body: bytes, host: str) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


async def test_an_answer_before_the_body_is_read_closes_and_says_so(api: Stack) -> None:
    url = urlsplit(api.url)
    assert url.hostname is not None and url.port is not None
    host = url.netloc
    big = b'{"workflow": "' + b"x" * (2 * TEST_MAX_BODY_BYTES) + b'"}'
    unread = [
        post("/runs", big, host),  # 413 from Content-Length, the body unread
        post("/no-such-route", b'{"a": 1}', host),  # 404, never read
        post("/runs", b'{"a": 1}', host).replace(b"POST", b"PUT", 1),  # 405
    ]
    with trio.fail_after(EXCHANGE_S * (len(unread) + 1)):
        for request in unread:
            stream = await trio.open_tcp_stream(url.hostname, url.port)
            async with stream:
                status, headers = await exchange(stream, request)
                assert status in (404, 405, 413), (status, headers)
                assert headers.get("connection") == "close", (request[:40], status, headers)
        # A request whose body was read keeps its connection: the next one is answered on it.
        stream = await trio.open_tcp_stream(url.hostname, url.port)
        async with stream:
            status, headers = await exchange(stream, post("/runs", b'{"a": 1}', host))
            assert status == 400 and "connection" not in headers, (status, headers)
            status, headers = await exchange(
                stream, f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
            )
            assert status == 200, (status, headers)
