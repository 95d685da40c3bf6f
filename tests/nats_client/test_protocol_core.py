"""The sans-IO NATS core, tested like h11: round trips, every split, malformed input, limits."""

from __future__ import annotations

import ast
import itertools
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.nats import (
    CONFLICT_STATUS,
    DEFAULT_MAX_PAYLOAD_BYTES,
    DELIVERY_MAX_PAYLOAD_FACTOR,
    IDLE_HEARTBEAT_STATUS,
    MAX_CONTROL_LINE_BYTES,
    MAX_HEADER_BYTES,
    NEED_DATA,
    NO_RESPONDERS_STATUS,
    REQUEST_TIMEOUT_STATUS,
    ClientProtocol,
    Connect,
    Err,
    Event,
    Headers,
    Info,
    Msg,
    NeedData,
    Ok,
    Parser,
    Ping,
    Pong,
    ProtocolError,
    Pub,
    Sub,
    Unsub,
    encode,
)

#: Moderate counts: the machine is shared, and the split tests are exhaustive anyway.
EXAMPLES = 60
CORE = pathlib.Path(__file__).resolve().parents[2] / "dagnats_trio" / "nats"
#: The modules of the sans-IO core (the Trio shell lives beside them).
CORE_MODULES = ("_limits", "_errors", "_headers", "_events", "_encoder", "_parser", "_protocol")

# --- strategies ------------------------------------------------------------------------------

tokens = st.text(
    alphabet=st.characters(blacklist_characters=" \t\r\n\x0b\x0c", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=24,
)
header_names = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=":"),
    min_size=1,
    max_size=16,
)
header_values = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
    max_size=24,
).map(lambda s: s.strip(" \t"))
statuses = st.one_of(st.none(), st.integers(100, 999))


@st.composite
def headers_st(draw: st.DrawFn) -> Headers:
    status = draw(statuses)
    description = draw(header_values) if status is not None else ""
    fields = draw(st.lists(st.tuples(header_names, header_values), max_size=5))
    return Headers(fields=tuple(fields), status=status, description=description)


payloads = st.binary(max_size=200)
optional_tokens = st.one_of(st.none(), tokens)
optional_headers = st.one_of(st.none(), headers_st())
texts = st.text(max_size=20)

events: st.SearchStrategy[Event] = st.one_of(
    st.builds(Pub, tokens, payloads, optional_tokens, optional_headers),
    st.builds(Msg, tokens, tokens, payloads, optional_tokens, optional_headers),
    st.builds(Sub, tokens, tokens, optional_tokens),
    st.builds(Unsub, tokens, st.one_of(st.none(), st.integers(0, 10**9))),
    st.just(Ping()),
    st.just(Pong()),
    st.just(Ok()),
    st.builds(
        Err,
        st.text(
            alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)),
            max_size=40,
        ),
    ),
    st.builds(
        Info,
        server_id=texts,
        server_name=texts,
        version=texts,
        proto=st.integers(0, 5),
        port=st.integers(0, 65535),
        headers=st.booleans(),
        max_payload=st.integers(1, 2**40),
        jetstream=st.booleans(),
        nonce=st.one_of(st.none(), texts),
        client_id=st.one_of(st.none(), st.integers(0, 2**53)),
        connect_urls=st.lists(texts, max_size=3).map(tuple),
        lame_duck_mode=st.booleans(),
    ),
    st.builds(
        Connect,
        verbose=st.booleans(),
        name=st.one_of(st.none(), texts),
        echo=st.booleans(),
        user=st.one_of(st.none(), texts),
        password=st.one_of(st.none(), texts),
        auth_token=st.one_of(st.none(), texts),
    ),
)


def parse_all(data: bytes, *, chunks: list[int] | None = None) -> list[Event]:
    """The events of ``data`` read in ``chunks``, parsed both ways a parser is given bytes:
    added to its buffer (``receive_data``, then ``events``), and handed to ``feed``, which
    parses a read where it lies when nothing is buffered and keeps only what is left of it;
    both must give the same events and leave nothing buffered."""
    parser, fed = Parser(), Parser()
    out: list[Event] = []
    got_fed: list[Event] = []
    pieces = [data] if chunks is None else split_at(data, chunks)
    for piece in pieces:
        parser.receive_data(piece)
        out.extend(parser.events())
        # Without ``on_control``, ``feed`` stops after an event that is not a MSG: the rest
        # of the read waits in the buffer for the next call.
        got = fed.feed(piece)
        while got:
            got_fed += got
            got = fed.feed()
    assert parser.next_event() is NEED_DATA
    assert parser.buffered_bytes == 0
    assert fed.buffered_bytes == 0
    assert got_fed == out
    return out


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# --- round trips -----------------------------------------------------------------------------


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(events)
def test_encode_then_parse_gives_the_same_event(event: Event) -> None:
    assert parse_all(encode(event)) == [event]


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(events, min_size=1, max_size=8), st.lists(st.integers(0, 4000), max_size=12))
def test_a_stream_of_events_survives_any_chunking(batch: list[Event], cuts: list[int]) -> None:
    data = b"".join(encode(event) for event in batch)
    assert parse_all(data, chunks=cuts) == batch


#: Subjects the fast path must tell from plain tokens: empty, spaced, non-ASCII, control bytes.
any_subjects = st.one_of(tokens, st.text(max_size=12), st.sampled_from(["", " ", "a b", "a\tb"]))


@settings(max_examples=EXAMPLES * 3, deadline=None)
@given(any_subjects, payloads, st.one_of(st.none(), any_subjects), optional_headers)
def test_send_pub_frames_what_parses_back_or_refuses(
    subject: str, payload: bytes, reply: str | None, headers: Headers | None
) -> None:
    """The PUB fast path (no :class:`Pub` made) frames only what parses back to the same
    message, and refuses with the field-by-field checks' error otherwise."""
    proto = ClientProtocol()
    try:
        data = proto.send_pub(subject, payload, reply, headers)
    except ProtocolError as exc:
        with pytest.raises(ProtocolError) as checked:
            encode(Msg(subject, "1", payload, reply, headers))  # the same fields, checked
        assert (
            str(exc).removeprefix("H").split(":")[1:2]
            == (str(checked.value).removeprefix("H").split(":")[1:2])
        )
        return
    assert parse_all(data) == [Pub(subject, payload, reply, headers)]
    assert proto.send(Pub(subject, payload, reply, headers)) == data


def _one_by_one(proto: ClientProtocol) -> list[Event]:
    out: list[Event] = []
    while (event := proto.next_event()) is not NEED_DATA:
        assert not isinstance(event, NeedData)
        out.append(event)
    return out


server_events: st.SearchStrategy[Event] = st.one_of(
    st.builds(Msg, tokens, tokens, payloads, optional_tokens, optional_headers),
    st.just(Ping()),
    st.just(Pong()),
    st.just(Ok()),
    # An INFO may lower max_payload below a message that follows it in the same read.
    st.builds(Info, max_payload=st.integers(1, 400), headers=st.booleans()),
    st.builds(Sub, tokens, tokens, optional_tokens),  # not a server's: refused
)


@settings(max_examples=EXAMPLES * 2, deadline=None)
@given(
    st.lists(server_events, min_size=1, max_size=8),
    st.lists(st.integers(0, 4000), max_size=12),
)
def test_events_in_one_call_are_next_event_one_by_one(batch: list[Event], cuts: list[int]) -> None:
    """``events()`` and ``feed(data)`` (the reader's one call per read: the bytes added and
    parsed) give what ``next_event`` until ``NEED_DATA`` gives, INFO's new limits applied to
    what follows it, and the same error."""
    data = b"".join(encode(event) for event in batch)
    one, bulk, fed = ClientProtocol(), ClientProtocol(), ClientProtocol()
    got_one: list[Event] = []
    got_bulk: list[Event] = []
    got_fed: list[Event] = []
    error_one = error_bulk = error_fed = None
    for piece in split_at(data, cuts):
        one.receive_data(piece)
        bulk.receive_data(piece)
        if error_one is None:
            try:
                got_one += _one_by_one(one)
            except ProtocolError as exc:
                error_one = str(exc)
        if error_bulk is None:
            try:
                got_bulk += bulk.events()
            except ProtocolError as exc:
                error_bulk = str(exc)
        if error_fed is None:
            try:
                got_fed += fed.feed(piece)
            except ProtocolError as exc:
                error_fed = str(exc)
    assert error_bulk == error_one == error_fed
    if error_one is None:
        assert got_fed == got_bulk == got_one == batch
    else:  # the events of the failed read before the error are not handed out
        assert got_one[: len(got_bulk)] == got_bulk == got_fed
    if error_fed is not None:  # failed for good: the framing is lost
        with pytest.raises(ProtocolError):
            fed.feed(b"PING\r\n")


@settings(max_examples=EXAMPLES, deadline=None)
@given(headers_st())
def test_headers_round_trip_with_status_lines(headers: Headers) -> None:
    msg = Msg("s", "1", b"x", None, headers)
    (parsed,) = parse_all(encode(msg))
    assert isinstance(parsed, Msg)
    assert parsed.headers == headers
    assert parsed.status == headers.status


# --- every message split at every byte boundary ----------------------------------------------

CORPUS: list[Event] = [
    Info(server_id="NSERVER", version="2.15.1", max_payload=1048576, headers=True, jetstream=True),
    Connect(name="t", user="u", password="p", headers=True, no_responders=True),
    Pub("orders.new", b"hello\r\nworld"),
    Pub("orders.new", b"", reply="_INBOX.abc.1"),
    Pub(
        "a",
        b"body",
        "r",
        Headers.of({"Nats-Msg-Id": "m1", "Nats-Expected-Last-Subject-Sequence": "7"}),
    ),
    Sub("orders.*", "1"),
    Sub("orders.>", "22", queue="workers"),
    Unsub("1"),
    Unsub("22", max_msgs=5),
    Msg("orders.new", "1", b"payload"),
    Msg("orders.new", "1", b"", reply="$JS.ACK.x.y.1.2.3"),
    Msg("_INBOX.abc.7", "1", b"", headers=Headers(status=NO_RESPONDERS_STATUS)),
    Msg(
        "i", "9", b"", headers=Headers(status=REQUEST_TIMEOUT_STATUS, description="Request Timeout")
    ),
    Msg(
        "i",
        "9",
        b"",
        headers=Headers(status=CONFLICT_STATUS, description="Exceeded MaxWaiting"),
    ),
    Msg(
        "i",
        "9",
        b"",
        headers=Headers(
            fields=(("Nats-Last-Consumer", "0"), ("Nats-Last-Stream", "0")),
            status=IDLE_HEARTBEAT_STATUS,
            description="Idle Heartbeat",
        ),
    ),
    Msg("k", "3", b"v", headers=Headers(fields=(("X", "1"), ("x", "2"), ("Y", "")))),
    Ping(),
    Pong(),
    Ok(),
    Err("Authorization Violation"),
]


@pytest.mark.parametrize("event", CORPUS, ids=lambda e: type(e).__name__)
def test_every_message_split_at_every_byte_boundary(event: Event) -> None:
    data = encode(event)
    for cut in range(len(data) + 1):
        assert parse_all(data, chunks=[cut]) == [event], cut
    # and one byte at a time
    assert parse_all(data, chunks=list(range(len(data)))) == [event]


def test_the_whole_corpus_in_one_buffer_and_byte_by_byte() -> None:
    data = b"".join(encode(event) for event in CORPUS)
    assert parse_all(data) == CORPUS
    assert parse_all(data, chunks=list(range(len(data)))) == CORPUS


def test_parses_what_a_server_writes() -> None:
    """Server spellings the encoder does not produce: lower case, tabs, a bare description."""
    data = (
        b"msg\tfoo 1\t 3\r\nabc\r\n"
        b"HMSG _INBOX.x.1 1 32 32\r\nNATS/1.0 408 Request Timeout\r\n\r\n\r\n"
        b"-ERR 'Stale Connection'\r\n"
        b"-ERR Unquoted\r\n"
        b"HMSG a 1 r 20 23\r\nNATS/1.0\r\nK:  v \r\n\r\nxyz\r\n"
        b'INFO {"server_id":"N","max_payload":64,"future_field":{"x":1}}\r\n'
    )
    assert parse_all(data) == [
        Msg("foo", "1", b"abc"),
        Msg("_INBOX.x.1", "1", b"", headers=Headers(status=408, description="Request Timeout")),
        Err("Stale Connection"),
        Err("Unquoted"),
        Msg("a", "1", b"xyz", "r", Headers(fields=(("K", "v"),))),
        Info(server_id="N", max_payload=64),
    ]


# --- malformed input: one ProtocolError naming what was wrong --------------------------------

MALFORMED = [
    (b"FOO bar\r\n", "unknown operation"),
    (b"\r\n", "unknown operation"),
    (b"MSG a 1\r\n", "MSG: 2 arguments"),
    (b"MSG a 1 r s 3\r\n", "MSG: 5 arguments"),
    (b"MSG a 1 x3\r\n", "MSG: size"),
    (b"MSG a 1 -3\r\n", "MSG: size"),
    (b"MSG a 1 3\r\nabcd\r\n", "not followed by CRLF"),
    (b"HMSG a 1 20 10\r\n", "header size 20 over total size 10"),
    (b"HMSG a 1 3\r\n", "HMSG: 3 arguments"),
    (b"HMSG a 1 5 5\r\nNATS/\r\n", "does not end with an empty line"),
    (b"HMSG a 1 12 12\r\nHTTP/1.1\r\n\r\n\r\n", "is not NATS/1.0"),
    (b"HMSG a 1 16 16\r\nNATS/1.0 5x3\r\n\r\n\r\n", "status b'5x3' is not three digits"),
    (b"HMSG a 1 17 17\r\nNATS/1.0\r\nBad\r\n\r\n\r\n", "has no colon"),
    (b"HMSG a 1 20 20\r\nNATS/1.0\r\nB d: 1\r\n\r\n\r\n", "header name 'B d'"),
    (b"HMSG a 1 18 18\r\nNATS/1.0\r\nK: \xff\r\n\r\n\r\n", "header value is not UTF-8"),
    (b"MSG \xff 1 0\r\n\r\n", "MSG: subject"),
    (b"PING x\r\n", "PING: takes no arguments"),
    (b"INFO {nope\r\n", "INFO: argument is not JSON"),
    (b"INFO []\r\n", "INFO: argument is not a JSON object"),
    (b'INFO {"max_payload":"big"}\r\n', "INFO: field 'max_payload' is not int"),
    (b'INFO {"max_payload":0}\r\n', "INFO: field 'max_payload' is not positive"),
    (b'INFO {"headers":1}\r\n', "INFO: field 'headers' is not bool"),
    (b'CONNECT {"user":5}\r\n', "CONNECT: field 'user' is not str"),
    (b"SUB a\r\n", "SUB: 1 arguments"),
    (b"UNSUB\r\n", "UNSUB: 0 arguments"),
    (b"UNSUB 1 many\r\n", "UNSUB: max_msgs"),
    (b"PUB a\r\n", "PUB: 1 arguments"),
    (b"HPUB a 1\r\n", "HPUB: 2 arguments"),
]


@pytest.mark.parametrize(("data", "named"), MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_input_names_what_was_wrong(data: bytes, named: str) -> None:
    parser = Parser()
    parser.receive_data(data)
    with pytest.raises(ProtocolError, match=None) as info:
        list(parser.events())
    assert named in str(info.value)
    # the framing is lost: the parser stays failed, with the same error
    parser.receive_data(b"PING\r\n")
    with pytest.raises(ProtocolError) as again:
        parser.next_event()
    assert again.value is info.value


BAD_EVENTS = [
    (Pub("", b""), "PUB: subject is empty"),
    (Pub("a b", b""), "PUB: subject 'a b' contains whitespace"),
    (Pub("a", b"", reply="r\n"), "PUB: reply"),
    (Sub("a", "1", queue="q q"), "SUB: queue"),
    (Sub("a", ""), "SUB: sid is empty"),
    (Unsub("1", max_msgs=-1), "UNSUB: max_msgs -1 is negative"),
    (Err("two\nlines"), "-ERR: message"),
    (Err("\ud800"), "-ERR: message '\\ud800' is not valid UTF-8"),
    (Pub("a\udc00", b""), "PUB: subject 'a\\udc00' is not valid UTF-8"),
    (Pub("a", b"", headers=Headers(fields=(("K", "\ud800"),))), "headers: field"),
    (Pub("a", b"", headers=Headers(fields=(("Bad:Name", "v"),))), "header name 'Bad:Name'"),
    (Pub("a", b"", headers=Headers(fields=(("K", "v\r\nInjected: 1"),))), "contains CR or LF"),
    (Pub("a", b"", headers=Headers(fields=(("K", " v"),))), "surrounding whitespace"),
    (Pub("a", b"", headers=Headers(status=1000)), "status 1000 is not three digits"),
    (Pub("a", b"", headers=Headers(description="Idle")), "a description needs a status"),
    (Sub("x" * MAX_CONTROL_LINE_BYTES, "1"), "SUB: control line of"),
]


@pytest.mark.parametrize(("event", "named"), BAD_EVENTS, ids=[b[1] for b in BAD_EVENTS])
def test_unsendable_events_are_refused_naming_the_field(event: Event, named: str) -> None:
    with pytest.raises(ProtocolError) as info:
        encode(event)
    assert named in str(info.value)


# --- size limits -----------------------------------------------------------------------------


def test_max_payload_comes_from_info_and_binds_both_directions() -> None:
    proto = ClientProtocol()
    assert proto.max_payload_bytes == DEFAULT_MAX_PAYLOAD_BYTES
    proto.receive_data(encode(Info(max_payload=16)))
    info = proto.next_event()
    assert isinstance(info, Info)
    assert proto.max_payload_bytes == 16
    assert proto.send(Pub("a", b"x" * 16)) == b"PUB a 16\r\n" + b"x" * 16 + b"\r\n"
    with pytest.raises(ProtocolError, match="PUB: 17 bytes of payload, over max_payload 16"):
        proto.send(Pub("a", b"x" * 17))
    # headers count towards max_payload
    with pytest.raises(ProtocolError, match="over max_payload 16"):
        proto.send(Pub("a", b"x", headers=Headers.of(K="v")))
    # A message from the server may pass max_payload by what the server itself adds (its
    # headers on a stored message, the base64 and JSON of a STREAM.MSG.GET answer) ...
    bound = DELIVERY_MAX_PAYLOAD_FACTOR * 16 + MAX_HEADER_BYTES
    proto.receive_data(b"MSG a 1 17\r\n" + b"x" * 17 + b"\r\n")
    assert proto.next_event() == Msg("a", "1", b"x" * 17)
    hmsg = b"HMSG a 1 12 %d\r\nNATS/1.0\r\n\r\n" % bound
    proto.receive_data(hmsg + b"x" * (bound - 12) + b"\r\n")
    got = proto.next_event()
    assert isinstance(got, Msg) and len(got.payload) == bound - 12
    # ... and no further: one byte more is refused at its control line.
    proto.receive_data(b"MSG a 1 %d\r\n" % (bound + 1))
    with pytest.raises(ProtocolError, match=f"MSG: {bound + 1} bytes of payload, over {bound}"):
        proto.next_event()


def test_a_control_line_without_crlf_is_bounded() -> None:
    parser = Parser()
    parser.receive_data(b"MSG " + b"a" * MAX_CONTROL_LINE_BYTES)
    with pytest.raises(ProtocolError, match=r"over 4096 bytes without CRLF"):
        parser.next_event()
    # a whole line that is too long, too
    parser = Parser()
    parser.receive_data(b"SUB " + b"a" * MAX_CONTROL_LINE_BYTES + b" 1\r\n")
    with pytest.raises(ProtocolError, match="control line of 4102 bytes, over 4096"):
        parser.next_event()


def test_a_header_block_over_the_limit_is_refused() -> None:
    big = MAX_HEADER_BYTES + 1
    parser = Parser(max_payload_bytes=10 * big)
    parser.receive_data(b"HMSG a 1 %d %d\r\n" % (big, big))
    with pytest.raises(ProtocolError, match=f"header size {big} over {MAX_HEADER_BYTES}"):
        parser.next_event()
    headers = Headers(fields=(("K", "v" * MAX_HEADER_BYTES),))
    with pytest.raises(ProtocolError, match=f"more than {MAX_HEADER_BYTES}"):
        encode(Pub("a", b"", headers=headers), max_payload_bytes=10 * big)


def test_roles_client_sends_client_ops_and_receives_server_ops() -> None:
    proto = ClientProtocol()
    with pytest.raises(ProtocolError, match="MSG: not sent by a client"):
        proto.send(Msg("a", "1"))
    with pytest.raises(ProtocolError, match="INFO: not sent by a client"):
        proto.send(Info())
    proto.receive_data(encode(Pub("a", b"x")))
    with pytest.raises(ProtocolError, match="PUB: not sent by a server"):
        proto.next_event()
    proto = ClientProtocol()
    proto.receive_data(encode(Info(headers=False)))
    proto.next_event()
    with pytest.raises(ProtocolError, match="HPUB: the server does not support headers"):
        proto.send(Pub("a", b"", headers=Headers.of(K="v")))
    assert proto.send(Ping()) == b"PING\r\n"


def test_send_pub_follows_each_info_s_headers_and_max_payload() -> None:
    # send_pub is bound anew on every INFO: its limit and whether HPUB may go out.
    proto = ClientProtocol()
    assert proto.send_pub("a", b"x" * 20, None, Headers.of(K="v")).startswith(b"HPUB a ")
    proto.receive_data(encode(Info(headers=False, max_payload=16)))
    proto.next_event()
    with pytest.raises(ProtocolError, match="HPUB: the server does not support headers"):
        proto.send_pub("a", b"x", None, Headers.of(K="v"))
    with pytest.raises(ProtocolError, match="over max_payload 16"):
        proto.send_pub("a", b"x" * 17, None, None)
    assert proto.send_pub("a", b"x" * 16, "r", None) == b"PUB a r 16\r\n" + b"x" * 16 + b"\r\n"
    proto.receive_data(encode(Info(headers=True, max_payload=32)))
    assert proto.events() == [Info(headers=True, max_payload=32)]
    with pytest.raises(ProtocolError, match="over max_payload 32"):
        proto.send_pub("a", b"x" * 33, None, None)
    assert proto.send_pub("a", b"x" * 10, None, Headers.of(K="v")).startswith(b"HPUB a ")


def test_headers_lookup_is_case_insensitive_and_keeps_repeats() -> None:
    headers = Headers(fields=(("Nats-Msg-Id", "1"), ("nats-msg-id", "2")))
    assert headers.get("NATS-MSG-ID") == "1"
    assert headers.get_all("nats-msg-id") == ("1", "2")
    assert headers.get("missing") is None


def test_the_core_imports_no_io_library() -> None:
    forbidden = {"trio", "asyncio", "nats", "trio_asyncio", "socket", "ssl", "anyio"}
    for name in CORE_MODULES:
        tree = ast.parse((CORE / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                roots = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                roots = {(node.module or "").split(".")[0]}
            else:
                continue
            assert not roots & forbidden, (name, roots & forbidden)


def test_events_of_one_read_take_an_info_s_limits_before_the_messages_after_it() -> None:
    # The reader's path (one events() call per read): an INFO in the middle of what was read
    # is checked and its limits taken before the messages after it are parsed.
    proto = ClientProtocol()
    proto.receive_data(
        encode(Msg("a", "1", b"x" * 20)) + encode(Info(max_payload=16)) + b"MSG a 1 3\r\nxyz\r\n"
    )
    assert proto.events() == [Msg("a", "1", b"x" * 20), Info(max_payload=16), Msg("a", "1", b"xyz")]
    assert proto.max_payload_bytes == 16
    assert proto.events() == []
    # A delivery's bound follows max_payload (DELIVERY_MAX_PAYLOAD_FACTOR of it plus a header
    # block): one byte over the bound of 8, within the bound of the 16 before it.
    size = DELIVERY_MAX_PAYLOAD_FACTOR * 8 + MAX_HEADER_BYTES + 1
    proto.receive_data(encode(Info(max_payload=8)) + b"MSG a 1 %d\r\n" % size)
    with pytest.raises(ProtocolError, match=f"MSG: {size} bytes of payload, over {size - 1}"):
        proto.events()


def test_events_refuse_a_client_operation_from_the_server_and_stay_failed() -> None:
    proto = ClientProtocol()
    proto.receive_data(encode(Msg("a", "1", b"ok")) + encode(Pub("a", b"x")) + encode(Ping()))
    with pytest.raises(ProtocolError, match="PUB: not sent by a server"):
        proto.events()
    with pytest.raises(ProtocolError, match="PUB: not sent by a server"):
        proto.events()  # the stream's framing is not trusted again
