"""Issue 12 item 3 (CPU per run): what the sans-IO core spends on the messages every request
makes, counted in Python function calls (a count, so the machine's load does not move it).

A request with headers, answered with headers, on a real nats-server: per round trip the core
encodes an HPUB on each side and parses an HMSG on each side. The fast paths for well-formed
MSG/HMSG lines and plain-token PUB/HPUB frames keep that to a few calls each; every odd frame
still goes through the field-by-field checks (the parser and encoder tests cover those).
"""

from __future__ import annotations

import cProfile
import uuid
from typing import Any, Final

import pytest
import trio

from dagnats_trio.nats import (
    ConnectionClosedError,
    Headers,
    ProtocolError,
    open_connection,
)

from ._echo import echo_client

#: Round trips measured (after one to warm up).
ROUND_TRIPS: Final = 50
#: Python calls into the core's codec modules per round trip (two HPUBs encoded, two HMSGs
#: parsed, the empty-buffer checks between them): 68 before the fast paths, 38 with them, 30
#: since a PUB is framed from its fields (no ``Pub`` event made) and a read's events come out in
#: one call (not ``next_event`` until ``NEED_DATA``), 28 since the responder's reply headers are
#: built once (``_echo.echo_client``), not by a ``Headers.of`` per round trip; 24 since a read
#: that leaves nothing buffered ends without one more parser call and a PUB reads the payload
#: limit from an attribute, not a property; 20 since a parsed control line waits for its
#: payload as a tuple (no ``__init__`` call) and a read's bytes go to the parser directly; 19
#: measured at f059acb, 17 since a MSG/HMSG line is matched in the parser's own frame (no
#: ``_fast_msg`` call per message); 15 since a read's events come from the parser's own
#: method (the client protocol checks a non-MSG event through the parser's ``on_control``,
#: with no ``events`` frame of its own around it); 9 since a read's bytes are added and its
#: events parsed in one ``feed`` call (no ``_next`` per message) and ``send_pub`` is
#: ``encode_pub`` itself (a partial; no frame of the client protocol per PUB); 9 at 368dbd8, 8
#: since headers given as a mapping are encoded as they are (no ``Headers.of`` per request).
MAX_CORE_CALLS_PER_ROUND_TRIP: Final = 9
#: The sans-IO modules that frame and parse every message.
CORE_MODULES: Final = (
    "nats/_parser.py",
    "nats/_encoder.py",
    "nats/_headers.py",
    "nats/_protocol.py",
)
#: The same with the built-in (C) calls those functions make (``len``, ``split``, ``decode``,
#: ...): 130 while a MSG/HMSG line was copied out of the buffer, split and checked token by
#: token, and a plain header block parsed line by line; 91 since the line is matched in place
#: by one regular expression and such a block is parsed in one ``findall``; 69 since a PUB's
#: subject and reply are tested and encoded as one string and a plain header block is spelled
#: as one text (its names checked once, its values without calls) and encoded once; 67 since a
#: match's groups are read by subscript (no ``groups()`` call); 61 since the parser measures
#: its buffer once per event and empties it with ``del`` (no ``len``/``clear`` calls); 61
#: measured at f059acb, 59 since; 55 since a read's last look at the buffer tests it empty
#: without ``len`` (a whole event that ends the buffer empties it); 53 since (as above); 47
#: since (as above: ``feed``, ``send_pub``); 53 since a header name is tested in place on every
#: block (``isascii``, ``isprintable``: 2 per name, 3 names a round trip) instead of looked up
#: in a process-wide set of names seen, which the library may not keep (no global state); 53
#: at 368dbd8, 52 since (as above).
MAX_CORE_CALLS_WITH_BUILTINS_PER_ROUND_TRIP: Final = 53
#: Python calls into the connection's own modules per round trip (the request and the
#: responder's publish queued, written, read, routed and woken): 36 before a frame checked the
#: connection inline and the request mux kept its count of requests in flight as an attribute
#: (both read once per frame), 32 since; 31 since a reply slot's wait has no coroutine frame of
#: its own; 27 since the reader task runs read_events itself (no frames of ours around it, each
#: passed through again on every read); 28 measured at 8c927c1, 26 since read_events handles the
#: socket's errors itself (the guard coroutine around it was resumed on every read); 24 since
#: the outbox tests a frame's room in the write (no ``has_room`` call per request) and the mux
#: tests its heap's slack itself (no ``_prune`` call per answered request); 22 since the
#: outbox reads the mux's count of requests in flight itself (no ``_queue`` frame per frame);
#: 22 at 368dbd8, 21 since the mux takes an answered request's slot out as it delivers the
#: reply (no ``forget`` call per answered request).
MAX_CONNECTION_CALLS_PER_ROUND_TRIP: Final = 22
#: The same with the built-in calls they make: 62 while the request mux made each token with
#: ``format(next(...))``, counted the requests in flight with ``len`` and read its alarm's
#: deadline through the scope's property, and a reply slot's wait was a coroutine of its own;
#: 56 since; 52 since the reader task runs read_events itself; 53 measured at 8c927c1, 51 since
#: read_events handles the socket's errors itself; 40 since (as above, and a frame's kinds
#: told by ``type(...) is``: no ``isinstance``, ``bytes`` or ``len`` call per frame in the
#: common case); 38 since (as above); 36 since (as above).
MAX_CONNECTION_CALLS_WITH_BUILTINS_PER_ROUND_TRIP: Final = 38
#: The Trio shell around the core: connection (its calls, its lifecycle), request mux, outbox,
#: reply slots, reader.
CONNECTION_MODULES: Final = (
    "nats/_connection.py",
    "nats/_lifecycle.py",
    "nats/_mux.py",
    "nats/_outbox.py",
    "nats/_waiters.py",
    "nats/_reader.py",
)
WAIT_S: Final = 20.0


def _calls_into(
    profiler: cProfile.Profile, modules: tuple[str, ...], *, builtins: bool = False
) -> int:
    """Calls of the functions of ``modules``; with ``builtins``, also the built-in (C) calls
    made by those functions (cProfile files those under ``~``, with their callers)."""
    profiler.create_stats()
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]]
    stats = profiler.stats  # type: ignore[attr-defined]

    def ours(filename: str) -> bool:
        return filename.replace("\\", "/").endswith(modules)

    total = sum(v[1] for k, v in stats.items() if ours(k[0]))
    if builtins:
        for key, (_cc, _nc, _tt, _ct, callers) in stats.items():
            if key[0] == "~":
                total += sum(c[1] for caller, c in callers.items() if ours(caller[0]))
    return total


async def test_a_request_costs_the_core_few_calls(nats_url: str) -> None:
    subject = f"nc.cost.{uuid.uuid4().hex[:12]}"
    headers = {"Nats-Msg-Id": "m1", "Nats-Expected-Last-Subject-Sequence": "7"}
    echo_headers = Headers.of({"Echo": "1"})
    async with echo_client(nats_url, subject, reply_headers=echo_headers) as client:
        with trio.fail_after(WAIT_S):
            await client.request(subject, b"warm", headers=headers)
            profiler = cProfile.Profile()
            profiler.enable()
            try:
                for i in range(ROUND_TRIPS):
                    msg = await client.request(subject, b"x%d" % i, headers=headers)
                    assert msg.payload == b"x%d" % i
                    assert msg.headers == echo_headers
            finally:
                profiler.disable()
    per_round_trip = _calls_into(profiler, CORE_MODULES) / ROUND_TRIPS
    with_builtins = _calls_into(profiler, CORE_MODULES, builtins=True) / ROUND_TRIPS
    connection = _calls_into(profiler, CONNECTION_MODULES) / ROUND_TRIPS
    connection_all = _calls_into(profiler, CONNECTION_MODULES, builtins=True) / ROUND_TRIPS
    print(
        f"core codec calls per round trip: {per_round_trip:.1f} ({with_builtins:.1f} with the "
        f"built-in calls they make), connection: {connection:.1f} ({connection_all:.1f})"
    )
    assert 0 < per_round_trip <= MAX_CORE_CALLS_PER_ROUND_TRIP
    assert per_round_trip < with_builtins <= MAX_CORE_CALLS_WITH_BUILTINS_PER_ROUND_TRIP
    assert 0 < connection <= MAX_CONNECTION_CALLS_PER_ROUND_TRIP
    assert connection < connection_all <= MAX_CONNECTION_CALLS_WITH_BUILTINS_PER_ROUND_TRIP


#: Calls of ``trio.current_time`` (the public wrapper, which reads the run's clock through two
#: more frames) per round trip: 1 at f059acb (the request's deadline), 0 since the connection
#: reads the clock of its run directly.
MAX_TRIO_CURRENT_TIME_CALLS_PER_ROUND_TRIP: Final = 0


def _python_calls(profiler: cProfile.Profile, *, named: str, in_file: str = "") -> int:
    """Calls of the Python functions ``named``, in a file whose path ends with ``in_file``."""
    profiler.create_stats()
    stats: dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]]
    stats = profiler.stats  # type: ignore[attr-defined]
    return sum(
        v[1]
        for (filename, _line, name), v in stats.items()
        if filename != "~" and name == named and filename.replace("\\", "/").endswith(in_file)
    )


async def test_a_request_reads_the_clock_without_the_wrapper(nats_url: str) -> None:
    subject = f"nc.clock.{uuid.uuid4().hex[:12]}"
    async with echo_client(nats_url, subject) as client:
        with trio.fail_after(WAIT_S):
            await client.request(subject, b"warm")
            profiler = cProfile.Profile()
            profiler.enable()
            try:
                for i in range(ROUND_TRIPS):
                    msg = await client.request(subject, b"c%d" % i)
                    assert msg.payload == b"c%d" % i
            finally:
                profiler.disable()
    wrapper = _python_calls(profiler, named="current_time", in_file="trio/_core/_generated_run.py")
    clock = _python_calls(profiler, named="current_time")
    print(
        f"per round trip: trio.current_time calls {wrapper / ROUND_TRIPS:.1f}, clock reads "
        f"(any current_time, the scheduler's included) {clock / ROUND_TRIPS:.1f}"
    )
    assert wrapper / ROUND_TRIPS <= MAX_TRIO_CURRENT_TIME_CALLS_PER_ROUND_TRIP
    assert clock >= ROUND_TRIPS  # the deadline is still read from the clock, once per request


async def test_try_publish_queues_at_once_and_refuses_what_publish_refuses(nats_url: str) -> None:
    subject = f"nc.try.{uuid.uuid4().hex[:12]}"
    async with open_connection(nats_url) as client, client.subscribe(subject) as sub:
        await client.flush()
        assert client.try_publish(subject, b"one", headers={"K": "1"})
        assert client.try_publish(subject, b"two", reply="r.1")
        with trio.fail_after(WAIT_S):
            first, second = await sub.next_msg(), await sub.next_msg()
        assert (first.payload, first.headers) == (b"one", Headers.of({"K": "1"}))
        assert (second.payload, second.reply) == (b"two", "r.1")
        with pytest.raises(ProtocolError, match="subject"):
            client.try_publish("bad subject", b"x")
        with pytest.raises(ProtocolError, match="max_payload"):
            client.try_publish(subject, b"x" * (client.max_payload_bytes + 1))
    with pytest.raises(ConnectionClosedError):
        client.try_publish(subject, b"late")
