"""A burst of 1,000 concurrent connections is answered in full: no TCP reset, no lost request.

hypercorn's own default listen backlog (100) overflowed under 400 concurrent requests and clients
saw resets; :class:`ApiServer` listens with
:data:`~dagnats_trio.api.server.DEFAULT_LISTEN_BACKLOG`. The requests are raw HTTP/1.1, each on
its own TCP connection (``Connection: close``), half of them NATS-backed writes (``POST /runs``),
half reads. Every connection is started in one tight loop, far faster than the server accepts,
so the listen queue alone decides: a connection the kernel dropped from a full queue comes back
as a reset or as a retransmitted SYN or request (read from the connection's ``TCP_INFO``), and
either fails the test. The only bound is a generous overall deadline; nothing is timed.

Each test runs on a nats-server of its own: the 1,500 runs the two leave behind (idle, and the
second's never seen by an engine) would otherwise be the backlog of the next test's engine on
the session's server, which a later test then waited on (seconds under load).
"""

from __future__ import annotations

import errno
import socket
import struct
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import trio

from dagnats_trio.api import Service
from dagnats_trio.api.service import START_RUNS_IN_FLIGHT
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import (
    TransportError,
    open_nats_py_transport,
    open_nats_transport,
    provision,
)

from ._stack import IDLE_WORKFLOW, Stack, idle_run, open_stack, register_workflows

#: Concurrent connections of the burst.
BURST_CONNECTIONS = 1_000
#: How many of them start a run (the rest read one).
BURST_POSTS = 500
#: Bound on the whole burst, generous for a loaded 2-core machine (no timing is asserted).
BURST_DEADLINE_S = 240.0
#: Where ``tcpi_total_retrans`` sits in Linux's ``struct tcp_info`` (stable since 2.6), and how
#: many bytes of the struct to ask for.
TCP_INFO_TOTAL_RETRANS_OFFSET = 100
TCP_INFO_BYTES = 104
#: Largest answer read from one connection (the answers here are a few hundred bytes).
ANSWER_MAX_BYTES = 65_536


def _request(method: str, path: str, body: bytes = b"") -> bytes:
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: burst\r\nConnection: close\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _exchange(sock: socket.socket, request: bytes) -> str:
    """The status code of the answer, or what went wrong instead (``reset``, ``no answer``)."""
    await trio.lowlevel.wait_writable(sock)
    error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if error:
        sock.close()
        return "reset" if error == errno.ECONNRESET else f"connect failed: {errno.errorcode[error]}"
    answer = b""
    async with trio.SocketStream(trio.socket.from_stdlib_socket(sock)) as stream:
        try:
            await stream.send_all(request)
            while len(answer) < ANSWER_MAX_BYTES:
                chunk = await stream.receive_some()
                if not chunk:
                    break
                answer += chunk
        except (trio.BrokenResourceError, ConnectionResetError):
            return "reset"
        retransmitted = _total_retransmissions(sock)
    if not answer.startswith(b"HTTP/1.1 "):
        return "no answer"
    status = answer[9:12].decode()
    return f"{status} after a retransmission" if retransmitted else status


def _total_retransmissions(sock: socket.socket) -> int:
    """``tcpi_total_retrans`` of the connection (Linux ``struct tcp_info``): a SYN or request
    the server's kernel dropped, because its listen queue was full, was sent again."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
    (total,) = struct.unpack_from("I", info, TCP_INFO_TOTAL_RETRANS_OFFSET)
    return int(total)


async def _burst(host: str, port: int, requests: list[bytes]) -> Counter[str]:
    """Runs on a Trio loop of its own in another thread. Every connection is started in one
    tight loop with no checkpoint, so all of them reach the server's listen queue before its
    accept loop can take many: the queue's size, not the scheduler, decides what happens."""
    socks = []
    for _ in requests:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        socks.append(sock)
    for sock in socks:
        code = sock.connect_ex((host, port))
        assert code in (0, errno.EINPROGRESS), errno.errorcode.get(code, code)
    outcomes: Counter[str] = Counter()

    async def one(sock: socket.socket, request: bytes) -> None:
        outcomes[await _exchange(sock, request)] += 1

    with trio.fail_after(BURST_DEADLINE_S):
        async with trio.open_nursery() as nursery:
            for sock, request in zip(socks, requests, strict=True):
                nursery.start_soon(one, sock, request)
    return outcomes


@pytest.fixture
async def own_api(fresh_nats_server: NatsServer) -> AsyncIterator[Stack]:
    """The REST stack of ``api``, on a server of this test's own."""
    async with open_nats_py_transport(fresh_nats_server.url, name="pytest-burst") as nats:
        await provision(nats)
        async with open_stack(nats, None) as stack:
            yield stack


async def test_a_burst_of_1000_connections_is_answered_without_resets(own_api: Stack) -> None:
    api = own_api
    host, port_text = api.url.removeprefix("http://").rsplit(":", 1)
    port = int(port_text)
    run_id = await idle_run(api)
    start_body = f'{{"workflow": "{IDLE_WORKFLOW}"}}'.encode()
    requests = [
        _request("POST", "/runs", start_body)
        if i < BURST_POSTS
        else _request("GET", f"/runs/{run_id}" if i % 2 else f"/workflows/{IDLE_WORKFLOW}")
        for i in range(BURST_CONNECTIONS)
    ]
    outcomes = await trio.to_thread.run_sync(trio.run, _burst, host, port, requests)
    print(f"burst of {BURST_CONNECTIONS} connections: {dict(outcomes)}")
    assert outcomes == Counter({"201": BURST_POSTS, "200": BURST_CONNECTIONS - BURST_POSTS})


#: Starts of the burst sent straight to the service, all at once.
SERVICE_BURST_STARTS = 1_000
#: The request deadline of the burst's own transport: short, so the starts queued behind each
#: other's durable writes on the server would miss it on any machine, but far above one start's
#: few round trips.
SHORT_REQUEST_TIMEOUT_S = 2.0


async def test_a_burst_of_starts_is_refused_none_on_a_slow_nats(
    fresh_nats_server: NatsServer,
) -> None:
    """Before the fix every start of a burst sent its NATS requests at once; their deadlines
    run from when they are sent, so the last of 500 starts timed out on a loaded machine (181
    of 500 ``POST /runs`` answered 503 with both cores busy). Starts now wait their turn in the
    service (``START_RUNS_IN_FLIGHT``), where no deadline runs."""
    async with open_nats_transport(
        fresh_nats_server.url,
        name="pytest-burst-starts",
        request_timeout_s=SHORT_REQUEST_TIMEOUT_S,
    ) as nats:
        await provision(nats)
        service = Service(nats)
        await register_workflows(service)
        run_ids: list[str] = []
        refused: Counter[str] = Counter()

        async def start() -> None:
            try:
                run_ids.append(await service.start_run(IDLE_WORKFLOW))
            except TransportError as exc:
                refused[type(exc).__name__] += 1

        started = trio.current_time()
        with trio.fail_after(BURST_DEADLINE_S):
            async with trio.open_nursery() as nursery:
                for _ in range(SERVICE_BURST_STARTS):
                    nursery.start_soon(start)
        took = trio.current_time() - started
        print(
            f"{SERVICE_BURST_STARTS} starts at once, {START_RUNS_IN_FLIGHT} in NATS at a time, "
            f"request deadline {SHORT_REQUEST_TIMEOUT_S} s: {len(run_ids)} started, "
            f"refused {dict(refused)}, {took:.1f} s"
        )
        assert refused == Counter()
        assert len(set(run_ids)) == SERVICE_BURST_STARTS
        for run_id in (run_ids[0], run_ids[-1]):
            assert (await service.get_run(run_id)).run_id == run_id
