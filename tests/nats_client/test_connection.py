"""The Trio connection on a real nats-server: pub/sub, requests, headers, JetStream, reconnect,
multi-server URLs, auth, TLS, stale detection, drain, limits."""

from __future__ import annotations

import json
import random
import ssl
import uuid
from pathlib import Path

import pytest
import trio

from dagnats_trio.nats import (
    NO_RESPONDERS_STATUS,
    READ_CHUNK_BYTES,
    RECONNECT_BACKOFF_BASE_S,
    RECONNECT_BACKOFF_MAX_S,
    AuthorizationError,
    Connection,
    ConnectionClosedError,
    Headers,
    Info,
    NatsTimeoutError,
    NoRespondersError,
    NoServersError,
    Parser,
    Ping,
    Pong,
    ProtocolError,
    Subscription,
    backoff_s,
    encode,
    open_connection,
)
from dagnats_trio.server import NatsServer

from ._servers import free_port, make_certificate, nats_server_with

#: Bound on every test's waits: generous, the machine is shared.
WAIT_S = 20.0


def unique(prefix: str) -> str:
    return f"{prefix}.{uuid.uuid4().hex[:12]}"


async def responder(conn: Connection, sub: Subscription) -> None:
    """Answer every request with its payload upper-cased, headers echoed."""
    async for msg in sub:
        if msg.reply:
            await conn.publish(msg.reply, msg.payload.upper(), headers=msg.headers)


async def test_publish_subscribe_with_headers(nats_url: str) -> None:
    subject = unique("nc.ps")
    headers = Headers(fields=(("Nats-Msg-Id", "m1"), ("X-Multi", "1"), ("X-Multi", "2")))
    async with (
        open_connection(nats_url, name="t") as pub,
        open_connection(nats_url) as sub_conn,
        sub_conn.subscribe(subject + ".*") as sub,
    ):
        await sub_conn.flush()
        await pub.publish(subject + ".a", b"plain")
        await pub.publish(subject + ".b", b"with headers", headers=headers)
        await pub.publish(subject + ".c", b"", reply="some.reply")
        with trio.fail_after(WAIT_S):
            first, second, third = [await sub.next_msg() for _ in range(3)]
    assert (first.subject, first.payload, first.headers) == (subject + ".a", b"plain", None)
    assert second.payload == b"with headers"
    assert second.headers == headers
    assert second.headers is not None and second.headers.get_all("x-multi") == ("1", "2")
    assert (third.payload, third.reply) == (b"", "some.reply")
    assert sub.delivered == 3 and sub.dropped == 0
    assert sub.closed


async def test_request_reply_and_no_responders(nats_url: str) -> None:
    subject = unique("nc.rr")
    async with open_connection(nats_url) as conn, conn.subscribe(subject) as sub:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(responder, conn, sub)
            answers = []
            async with trio.open_nursery() as calls:
                for i in range(20):

                    async def one(i: int = i) -> None:
                        msg = await conn.request(subject, b"x%d" % i, headers={"K": str(i)})
                        answers.append((msg.payload, msg.headers))

                    calls.start_soon(one)
            assert sorted(answers, key=lambda a: int(a[0][1:])) == [
                (b"X%d" % i, Headers.of(K=str(i))) for i in range(20)
            ]
            with pytest.raises(NoRespondersError, match="no responders"):
                await conn.request(unique("nc.nobody"), b"?")
            nursery.cancel_scope.cancel()
        assert conn.stats().pending_requests == 0


async def test_a_request_nobody_answers_times_out(nats_url: str) -> None:
    subject = unique("nc.silent")
    async with open_connection(nats_url) as conn, conn.subscribe(subject):
        with pytest.raises(NatsTimeoutError, match=r"no answer within 0\.2 s"):
            await conn.request(subject, b"?", timeout_s=0.2)
        assert conn.stats().pending_requests == 0


async def test_a_short_request_times_out_on_time_behind_a_long_one(nats_url: str) -> None:
    """Request deadlines are kept by the connection (one watcher, not a scope per request): a
    later request with an earlier deadline still times out at its own deadline, and the long
    one, still waiting, then gets its answer."""
    subject = unique("nc.deadlines")
    async with open_connection(nats_url) as conn, conn.subscribe(subject) as sub:
        answers: list[bytes] = []
        async with trio.open_nursery() as nursery:

            async def long_request() -> None:
                answers.append((await conn.request(subject, b"long", timeout_s=WAIT_S)).payload)

            nursery.start_soon(long_request)
            with trio.fail_after(WAIT_S):
                first = await sub.next_msg()
            assert first.payload == b"long"
            started = trio.current_time()
            with pytest.raises(NatsTimeoutError, match=r"no answer within 0\.2 s"):
                await conn.request(subject, b"short", timeout_s=0.2)
            waited = trio.current_time() - started
            assert 0.2 <= waited < WAIT_S / 2, waited
            assert conn.stats().pending_requests == 1  # the long one waits on
            assert first.reply is not None
            await conn.publish(first.reply, b"answered")
        assert answers == [b"answered"]
        assert conn.stats().pending_requests == 0


async def test_messages_larger_than_a_read_chunk_arrive_whole(nats_url: str) -> None:
    """The reader reads the socket in chunks of READ_CHUNK_BYTES and reads again at once after
    a full one: messages of several chunks, back to back, arrive whole and in order."""
    subject = unique("nc.big")
    payloads = [bytes([65 + i]) * (READ_CHUNK_BYTES * 3 + i) for i in range(4)]
    async with open_connection(nats_url) as conn, conn.subscribe(subject) as sub:
        for payload in payloads:
            await conn.publish(subject, payload)
        with trio.fail_after(WAIT_S):
            got = [(await sub.next_msg()).payload for _ in payloads]
    assert got == payloads


async def test_no_responders_status_arrives_as_a_status_line(nats_url: str) -> None:
    async with open_connection(nats_url) as conn:
        inbox = conn.new_inbox()
        async with conn.subscribe(inbox) as sub:
            await conn.publish(unique("nc.nobody"), b"", reply=inbox)
            with trio.fail_after(WAIT_S):
                msg = await sub.next_msg()
    assert msg.status == NO_RESPONDERS_STATUS
    assert msg.payload == b""


async def test_jetstream_expected_last_subject_sequence_gets_10071(nats_url: str) -> None:
    token = uuid.uuid4().hex[:12]
    stream, subject = f"NC_{token}", f"ncjs.{token}.a"
    config = {"name": stream, "subjects": [f"ncjs.{token}.>"], "storage": "memory"}
    async with open_connection(nats_url) as conn:
        created = json.loads(
            (
                await conn.request(f"$JS.API.STREAM.CREATE.{stream}", json.dumps(config).encode())
            ).payload
        )
        assert "error" not in created, created
        try:
            fence = "Nats-Expected-Last-Subject-Sequence"
            ok = json.loads((await conn.request(subject, b"one", headers={fence: "0"})).payload)
            assert ok["stream"] == stream and ok["seq"] == 1
            bad = json.loads((await conn.request(subject, b"two", headers={fence: "5"})).payload)
            assert bad["error"]["err_code"] == 10071, bad
            good = json.loads((await conn.request(subject, b"two", headers={fence: "1"})).payload)
            assert good["seq"] == 2
        finally:
            await conn.request(f"$JS.API.STREAM.DELETE.{stream}")


async def test_reconnect_after_restart_resubscribes(fresh_nats_server: NatsServer) -> None:
    subject = unique("nc.rc")
    async with (
        open_connection(fresh_nats_server.url, random=random.Random(7)) as conn,
        conn.subscribe(subject) as sub,
        conn.subscribe(subject + ".req") as requests,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(responder, conn, requests)
        await conn.flush()
        assert (await conn.request(subject + ".req", b"before")).payload == b"BEFORE"
        await fresh_nats_server.restart()
        with trio.fail_after(WAIT_S):
            await conn.flush()  # waits for the reconnect, then for a PONG of the new server
            await conn.publish(subject, b"after")
            msg = await sub.next_msg()
            answer = await conn.request(subject + ".req", b"after")
        assert msg.payload == b"after"
        assert answer.payload == b"AFTER"
        stats = conn.stats()
        assert stats.reconnects == 1 and stats.connected and stats.subscriptions == 2
        nursery.cancel_scope.cancel()


async def test_multi_server_urls_skip_a_dead_server(nats_url: str) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    async with open_connection(f"{dead},{nats_url}") as conn:
        assert conn.connected_url == nats_url
        await conn.flush()
    with pytest.raises(NoServersError, match="no server answered"):
        async with open_connection([dead]):
            pass  # pragma: no cover


def test_backoff_is_bounded_and_jittered() -> None:
    rng = random.Random(3)
    delays = [backoff_s(i, rng) for i in range(200)]
    assert RECONNECT_BACKOFF_BASE_S / 2 <= delays[0] <= RECONNECT_BACKOFF_BASE_S
    assert all(0 < d <= RECONNECT_BACKOFF_MAX_S for d in delays)
    late = delays[20:]
    assert min(late) >= RECONNECT_BACKOFF_MAX_S / 2
    assert len(set(late)) == len(late)  # jittered, not in step
    assert [backoff_s(i, random.Random(3)) for i in range(1)] == delays[:1]  # injectable source


async def test_user_password_auth() -> None:
    async with nats_server_with("--user", "alice", "--pass", "s3cret") as port:
        async with open_connection(
            f"nats://127.0.0.1:{port}", user="alice", password="s3cret"
        ) as c:
            await c.flush()
        async with open_connection(f"nats://alice:s3cret@127.0.0.1:{port}") as c:
            await c.flush()
        with pytest.raises(AuthorizationError, match="Authorization Violation"):
            async with open_connection(f"nats://127.0.0.1:{port}", user="alice", password="no"):
                pass  # pragma: no cover


async def test_token_auth() -> None:
    async with nats_server_with("--auth", "tok123") as port:
        async with open_connection(f"nats://127.0.0.1:{port}", token="tok123") as c:
            await c.flush()
        async with open_connection(f"nats://tok123@127.0.0.1:{port}") as c:
            await c.flush()
        with pytest.raises(AuthorizationError):
            async with open_connection(f"nats://127.0.0.1:{port}", token="wrong"):
                pass  # pragma: no cover


async def test_tls_with_url_scheme_and_context(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path)
    context = ssl.create_default_context(cafile=str(cert))
    subject = unique("nc.tls")
    async with nats_server_with("--tls", "--tlscert", str(cert), "--tlskey", str(key)) as port:
        async with open_connection(f"tls://localhost:{port}", tls=context) as conn:
            assert conn.server_info is not None and conn.server_info.tls_required
            async with conn.subscribe(subject) as sub:
                await conn.publish(subject, b"secret")
                with trio.fail_after(WAIT_S):
                    assert (await sub.next_msg()).payload == b"secret"
        # a server that requires TLS gets it over nats:// too, with the given context
        async with open_connection(f"nats://127.0.0.1:{port}", tls=context) as conn:
            await conn.flush()
        # and an untrusted certificate is refused
        with pytest.raises(NoServersError, match="CERTIFICATE_VERIFY_FAILED"):
            async with open_connection(f"tls://localhost:{port}", connect_timeout_s=5):
                pass  # pragma: no cover


async def test_stale_connection_is_detected_and_replaced() -> None:
    """A fake server that answers the handshake's PING and no other: the pinger gives up on it
    after ``max_outstanding_pings`` and the connection reconnects."""
    accepted: list[int] = []
    second = trio.Event()
    pings_seen: list[int] = []
    first_closed = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        index = len(accepted)
        accepted.append(index)
        if index == 1:
            second.set()
        parser = Parser()
        await stream.send_all(encode(Info(server_id="FAKE", headers=True)))
        answered = False
        pings = 0
        async for data in stream:
            parser.receive_data(data)
            for event in parser.events():
                if isinstance(event, Ping):
                    pings += 1
                    if not answered:
                        answered = True
                        await stream.send_all(encode(Pong()))
        pings_seen.append(pings)
        first_closed.set()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, serve, 0)
        port = listeners[0].socket.getsockname()[1]
        async with open_connection(
            f"nats://127.0.0.1:{port}",
            ping_interval_s=0.05,
            max_outstanding_pings=2,
            drain_timeout_s=0.2,
        ) as conn:
            with trio.fail_after(WAIT_S):
                await second.wait()
            with trio.fail_after(WAIT_S):
                await first_closed.wait()  # the client closed the stale socket
            assert pings_seen[0] == 3  # the handshake's, then two keep-alives unanswered
            assert not conn.closed
        nursery.cancel_scope.cancel()


async def test_drain_on_close_delivers_what_was_published(nats_url: str) -> None:
    subject = unique("nc.drain")
    async with open_connection(nats_url) as receiver, receiver.subscribe(subject) as sub:
        await receiver.flush()
        async with open_connection(nats_url) as sender:
            for i in range(500):
                await sender.publish(subject, b"%d" % i)
        # leaving the block drained: every message reached the server
        got = []
        with trio.fail_after(WAIT_S):
            for _ in range(500):
                got.append(int((await sub.next_msg()).payload))
        assert got == list(range(500))
    with pytest.raises(ConnectionClosedError):
        await sender.publish(subject, b"late")
    with pytest.raises(trio.EndOfChannel):
        await sub.next_msg()


async def test_limits_slow_consumer_and_oversized_payload(nats_url: str) -> None:
    subject = unique("nc.slow")
    async with open_connection(nats_url) as conn:
        async with conn.subscribe(subject, max_buffered_msgs=2) as sub:
            for i in range(10):
                await conn.publish(subject, b"%d" % i)
            await conn.flush()
            assert (sub.delivered, sub.dropped) == (2, 8)
            assert [(await sub.next_msg()).payload for _ in range(2)] == [b"0", b"1"]
        with pytest.raises(ProtocolError, match="over max_payload"):
            await conn.publish(subject, b"x" * (conn.max_payload_bytes + 1))
        await conn.flush()  # still usable
        assert conn.stats().subscriptions == 0
