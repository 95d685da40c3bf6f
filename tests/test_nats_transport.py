"""What only NatsTransport has: nats-py error mapping, reconnects, counting, no hidden consumers.

The behaviour every transport shares is in tests/transport/test_conformance.py.
"""

from __future__ import annotations

import secrets

import pytest
import trio

from dagnats_trio.protocol.layout import (
    CHECKPOINTS_BUCKET,
    HISTORY_STREAM,
    history_subject,
)
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import (
    Closed,
    KeyExists,
    NatsTransport,
    NotProvisioned,
    StreamSpec,
    TemporarilyUnavailable,
    Transport,
    TransportError,
    TransportTimeout,
    WrongLastSequence,
    open_nats_py_transport,
    provision,
)
from dagnats_trio.transport._nats import SUBSCRIBE_BUFFER_MSGS

TEST_BOUND_S = 20.0
#: How long the reconnect test keeps retrying a publish while the client reconnects.
RECONNECT_BOUND_S = 10.0
SHORT_TIMEOUT_S = 0.3


def uid() -> str:
    return "t" + secrets.token_hex(5)


async def test_open_needs_a_reachable_server() -> None:
    with pytest.raises(ValueError, match="at least one"):
        async with open_nats_py_transport([]):
            pass
    with trio.fail_after(TEST_BOUND_S), pytest.raises((TemporarilyUnavailable, TransportTimeout)):
        async with open_nats_py_transport("nats://127.0.0.1:1", connect_timeout_s=0.5):
            pass


async def test_bad_names_are_value_errors(nats_transport: NatsTransport) -> None:
    with pytest.raises(ValueError, match="stream"):
        await nats_transport.get_msg("NO.DOTS", 1)
    with pytest.raises(ValueError, match="bucket"):
        await nats_transport.kv_get("no dots.here", "k")
    with pytest.raises(ValueError, match="key"):
        await nats_transport.kv_put(CHECKPOINTS_BUCKET, "bad key", b"v")
    assert await nats_transport.kv_get(CHECKPOINTS_BUCKET, f"{uid()}.ok") is None


async def test_request_timeout_and_no_responders(nats_transport: NatsTransport) -> None:
    subject = f"api.{uid()}.silent"
    with trio.fail_after(TEST_BOUND_S):
        async with nats_transport.subscribe(subject):  # listens, never answers
            with pytest.raises(TransportTimeout):
                await nats_transport.request(subject, b"x", timeout_s=SHORT_TIMEOUT_S)
        with pytest.raises(TemporarilyUnavailable):
            await nats_transport.request(subject, b"x", timeout_s=SHORT_TIMEOUT_S)


async def test_cancelled_call_leaves_connection_usable(nats_transport: NatsTransport) -> None:
    subject = f"api.{uid()}.silent"
    with trio.fail_after(TEST_BOUND_S):
        async with nats_transport.subscribe(subject):
            with trio.move_on_after(SHORT_TIMEOUT_S) as scope:
                await nats_transport.request(subject, b"x", timeout_s=TEST_BOUND_S)
            assert scope.cancelled_caught
        seq = await nats_transport.publish(history_subject(uid()), b"after")
    assert seq > 0


async def test_typed_errors_carry_the_server_reason(nats_transport: NatsTransport) -> None:
    subject = history_subject(uid())
    one = await nats_transport.publish(subject, b"one", expected_last_subject_seq=0)
    with pytest.raises(WrongLastSequence, match="10071"):
        await nats_transport.publish(subject, b"two", expected_last_subject_seq=0)
    # A retried msg id whose first attempt was stored is not fenced, but a new id is.
    m1 = f"{subject}-m1"
    seq = await nats_transport.publish(subject, b"x", msg_id=m1, expected_last_subject_seq=one)
    again = await nats_transport.publish(subject, b"x", msg_id=m1, expected_last_subject_seq=one)
    assert again == seq
    with pytest.raises(WrongLastSequence):
        await nats_transport.publish(
            subject, b"y", msg_id=f"{subject}-m2", expected_last_subject_seq=one
        )
    with pytest.raises(NotProvisioned, match="provisioning"):
        await nats_transport.publish(f"nowhere.{uid()}", b"x")
    key = f"{uid()}.k"
    await nats_transport.kv_create(CHECKPOINTS_BUCKET, key, b"v")
    with pytest.raises(KeyExists, match=key):
        await nats_transport.kv_create(CHECKPOINTS_BUCKET, key, b"w")
    with pytest.raises(NotProvisioned):
        await nats_transport.kv_keys(f"nobucket{uid()}")


async def test_closed_transport_raises_closed(nats_url: str) -> None:
    async with open_nats_py_transport(nats_url) as transport:
        pass
    with pytest.raises(Closed):
        await transport.publish(history_subject(uid()), b"x")
    with pytest.raises(Closed):
        await transport.get_last_msg(HISTORY_STREAM, history_subject(uid()))
    await transport.aclose()  # closing twice is harmless


async def test_round_trips_count_each_server_answer(nats_transport: NatsTransport) -> None:
    subject = history_subject(uid())
    before = nats_transport.round_trips
    for i in range(3):
        await nats_transport.publish(subject, f"{i}".encode())
    assert nats_transport.round_trips == before + 3
    await nats_transport.get_last_msg(HISTORY_STREAM, subject)
    assert nats_transport.round_trips == before + 4
    page = await nats_transport.read_subject(HISTORY_STREAM, subject, 1, 10)
    assert len(page) == 3
    assert nats_transport.round_trips == before + 4 + 4  # three messages and the "no more"
    await nats_transport.read_subject(HISTORY_STREAM, subject, 1, 2)
    assert nats_transport.round_trips == before + 4 + 4 + 2  # a full page stops early
    await nats_transport.core_publish(f"core.{uid()}", b"fire and forget")
    assert nats_transport.round_trips == before + 10


async def test_reads_never_create_consumers(nats_transport: NatsTransport) -> None:
    token = uid()
    stream = f"READS_{token}"
    await nats_transport.ensure_stream(StreamSpec(stream, (f"reads.{token}.>",)))
    subject = f"reads.{token}.a"
    for i in range(3):
        await nats_transport.publish(subject, f"{i}".encode())
    last = await nats_transport.get_last_msg(stream, subject)
    page = await nats_transport.read_subject(stream, subject, 0, 10)
    assert last is not None and last.data == b"2"
    assert [m.data for m in page] == [b"0", b"1", b"2"]
    info = await nats_transport.stream_info(stream)
    assert info["state"]["consumer_count"] == 0
    assert info["state"]["messages"] == 3


async def test_ensure_stream_updates_in_place(nats_transport: NatsTransport) -> None:
    token = uid()
    stream = f"UPD_{token}"
    await nats_transport.ensure_stream(StreamSpec(stream, (f"upd.{token}.a",)))
    await nats_transport.ensure_stream(StreamSpec(stream, (f"upd.{token}.a",)))  # idempotent
    await nats_transport.ensure_stream(
        StreamSpec(stream, (f"upd.{token}.a", f"upd.{token}.b"), max_age_s=60.0)
    )
    info = await nats_transport.stream_info(stream)
    assert info["config"]["subjects"] == [f"upd.{token}.a", f"upd.{token}.b"]
    assert info["config"]["max_age"] == 60 * 10**9
    # nats-server cannot change a retention to or from a work queue: the stream keeps its own
    # and takes the rest of the new config.
    await nats_transport.ensure_stream(StreamSpec(stream, (f"upd.{token}.a",), work_queue=True))
    info = await nats_transport.stream_info(stream)
    assert info["config"]["retention"] == "limits"
    assert info["config"]["subjects"] == [f"upd.{token}.a"]


async def test_subscribe_backpressure_keeps_every_message(nats_transport: NatsTransport) -> None:
    subject = f"core.{uid()}"
    count = SUBSCRIBE_BUFFER_MSGS * 2
    with trio.fail_after(TEST_BOUND_S):
        async with nats_transport.subscribe(subject) as msgs:
            for i in range(count):
                await nats_transport.core_publish(subject, f"{i}".encode())
            got = []
            async for msg in msgs:
                got.append(msg.data)
                if len(got) == count:
                    break
    assert got == [f"{i}".encode() for i in range(count)]


async def test_reconnects_after_server_restart(fresh_nats_server: NatsServer) -> None:
    subject = history_subject(uid())
    async with open_nats_py_transport(fresh_nats_server.url, request_timeout_s=1.0) as transport:
        await provision(transport)
        first = await transport.publish(subject, b"before", msg_id="a")
        await fresh_nats_server.restart()
        attempts = 0
        with trio.fail_after(RECONNECT_BOUND_S):
            while True:
                attempts += 1
                try:
                    second = await transport.publish(subject, b"after", msg_id="b")
                    break
                except (TemporarilyUnavailable, TransportTimeout):
                    continue  # still reconnecting; the msg id makes the retry safe
        last = await transport.get_last_msg(HISTORY_STREAM, subject)
        page = await transport.read_subject(HISTORY_STREAM, subject, 0, 10)
    assert second == first + 1
    assert last is not None and last.data == b"after"
    assert [m.data for m in page] == [b"before", b"after"]  # the store survived the restart
    assert attempts >= 1


async def test_concurrent_requests_each_get_their_own_answer(
    nats_transport: NatsTransport,
) -> None:
    run = uid()
    results: dict[int, int] = {}

    async def append(i: int) -> None:
        results[i] = await nats_transport.publish(
            history_subject(f"{run}{i}"), b"x", expected_last_subject_seq=0
        )
        await nats_transport.core_publish(f"core.{run}", b"interleaved")  # queued in nats-py

    with trio.fail_after(TEST_BOUND_S):
        async with trio.open_nursery() as nursery:
            for i in range(50):
                nursery.start_soon(append, i)
    assert len(set(results.values())) == 50
    for i, seq in results.items():
        stored = await nats_transport.get_msg(HISTORY_STREAM, seq)
        assert stored.subject == history_subject(f"{run}{i}")


@pytest.fixture(params=["nats", "trio", "sim"])
def every_transport(request: pytest.FixtureRequest) -> Transport:
    """nats-py and the native client on the session server, and SimTransport."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value


async def test_header_values_cannot_inject_protocol(every_transport: Transport) -> None:
    """A header value with CR or LF is refused, nothing stored, on every transport (nats-py once
    folded it into the value and stored it, the native client refused it: the max_payload check
    the nats-py transport and the simulation now share encodes headers as the native client
    does, so all three refuse)."""
    t, subject = every_transport, history_subject(uid())
    with pytest.raises(TransportError, match="CR or LF"):
        await t.publish(subject, b"x", headers={"X-Note": "a\r\nPUB evil 1\r\n"})
    assert await t.get_last_msg(HISTORY_STREAM, subject) is None
    seq = await t.publish(subject, b"still usable")
    assert (await t.get_msg(HISTORY_STREAM, seq)).data == b"still usable"


#: A short connection deadline for the timeout test, and a generous bound on how late it may fire.
SHORT_REQUEST_TIMEOUT_S = 0.3
TIMEOUT_SLACK_S = 1.5


async def test_requests_time_out_at_the_connection_deadline(nats_url: str) -> None:
    # Requests on the connection's own deadline share one watchdog instead of a cancel scope
    # each: every one must still fail with TransportTimeout at its own deadline, alone or
    # staggered, and the connection must stay usable afterwards.
    silent = f"silent.{secrets.token_hex(4)}"
    stream = StreamSpec(f"TMO_{secrets.token_hex(4)}", (f"tmo.{secrets.token_hex(4)}",))
    async with open_nats_py_transport(nats_url, request_timeout_s=SHORT_REQUEST_TIMEOUT_S) as t:
        async with t.subscribe(silent):  # a listener that never answers: no "no responders"
            start = trio.current_time()
            with trio.fail_after(TEST_BOUND_S), pytest.raises(TransportTimeout):
                await t.request(silent, b"?", timeout_s=SHORT_REQUEST_TIMEOUT_S)
            waited = trio.current_time() - start
            assert SHORT_REQUEST_TIMEOUT_S <= waited < SHORT_REQUEST_TIMEOUT_S + TIMEOUT_SLACK_S

            waits: list[float] = []

            async def one(delay: float) -> None:
                await trio.sleep(delay)  # staggered starts are the subject of this test
                begun = trio.current_time()
                with pytest.raises(TransportTimeout):
                    await t.request(silent, b"?", timeout_s=SHORT_REQUEST_TIMEOUT_S)
                waits.append(trio.current_time() - begun)

            with trio.fail_after(SHORT_REQUEST_TIMEOUT_S * 10 + TIMEOUT_SLACK_S):
                async with trio.open_nursery() as nursery:
                    for i in range(10):
                        nursery.start_soon(one, i * 0.03)
            assert len(waits) == 10
            assert all(
                SHORT_REQUEST_TIMEOUT_S <= w < SHORT_REQUEST_TIMEOUT_S + TIMEOUT_SLACK_S
                for w in waits
            ), waits
        await t.ensure_stream(stream)
        assert await t.publish(stream.subjects[0], b"still usable") >= 1
