"""Issue 12 goal 3: the codec's fast paths (a ``MSG``/``HMSG`` line matched in place, a plain
header block parsed in one pass, a plain header block encoded as one text) give exactly what the
line-by-line parse and the part-by-part encoding give, errors included.

The oracle is the parser itself: a lower-case op (``msg``, which servers may send) and a header
block with a status line always take the slow path, so the same bytes with the upper-case op or
without the status must come out the same. Inputs mix what a server writes with the odd
spellings the fast paths must hand on (tabs, two spaces, long or signed counts, bytes that are
not UTF-8, CR or LF inside a value), and are cut into reads at random points.
"""

from __future__ import annotations

from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.nats import (
    NEED_DATA,
    ClientProtocol,
    Event,
    Headers,
    Msg,
    Parser,
    ProtocolError,
    Pub,
    encode_headers,
    parse_headers,
)

from .test_protocol_core import split_at

EXAMPLES: Final = 150

#: Argument tokens: plain ones (most often), and the odd ones a fast path must not take on its
#: own.
plain_tokens = st.sampled_from([b"A", b"_INBOX.x.1", b"$JS.ACK.S.c.1.2.3.4.0", b"Journal.R", b"1"])
tokens = st.one_of(plain_tokens, plain_tokens, plain_tokens, st.binary(min_size=1, max_size=6))
counts = st.one_of(
    st.integers(0, 40).map(lambda n: b"%d" % n),
    st.sampled_from([b"0" * 13, b"9" * 13, b"+3", b"-1", b"3x", b"\xd9\xa3", b""]),
)
separators = st.sampled_from([b" "] * 8 + [b"\t", b"  "])


@st.composite
def control_rest(draw: st.DrawFn, header_bytes: int, total_bytes: int) -> bytes:
    """What follows the op of a MSG (``header_bytes`` -1) or HMSG line, CRLF included: the
    counts right (most often) or drawn."""
    args = [draw(tokens), draw(tokens)]
    if draw(st.booleans()):
        args.append(draw(tokens))
    right = draw(st.integers(0, 3)) > 0
    if header_bytes >= 0:
        args.append(b"%d" % header_bytes if right else draw(counts))
    args.append(b"%d" % total_bytes if right else draw(counts))
    out = b""
    for arg in args:
        out += draw(separators) + arg
    return out + b"\r\n"


field_lines = st.one_of(
    st.sampled_from(
        [
            b"Nats-Msg-Id: m1",
            b"Nats-Expected-Last-Subject-Sequence:7",
            b"K:  v \t",
            b"E:",
            b"X: a:b c",
            b"Bad",
            b" K: v",
            b"B d: 1",
            b"K: v\rw",
            b"K: v\nw",
            b"K: \xff",
            b"\xc3\xa9: v",
            b"K: \xc3\xa9",
        ]
    ),
    st.binary(max_size=12),
)


@st.composite
def header_fields(draw: st.DrawFn) -> bytes:
    """The field lines of a header block and its closing blank line."""
    lines = draw(st.lists(field_lines, max_size=4))
    return b"".join(line + b"\r\n" for line in lines) + b"\r\n"


def _outcome(data: bytes, cuts: list[int]) -> tuple[list[Event], str | None]:
    """The events parsed from ``data`` read in pieces, and the error it ended with."""
    parser = Parser()
    out: list[Event] = []
    try:
        for piece in split_at(data, cuts):
            parser.receive_data(piece)
            while (event := parser.next_event()) is not NEED_DATA:
                assert isinstance(event, Event)
                out.append(event)
    except ProtocolError as exc:
        return out, str(exc)
    return out, None


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.booleans(),
    header_fields(),
    st.binary(max_size=40),
    st.data(),
    st.lists(st.integers(0, 120), max_size=4),
)
def test_a_msg_line_parses_as_the_slow_path_parses_it(
    headers: bool, fields: bytes, payload: bytes, data: st.DataObject, cuts: list[int]
) -> None:
    block = b"NATS/1.0\r\n" + fields if headers else b""
    rest = data.draw(control_rest(len(block) if headers else -1, len(block) + len(payload)))
    tail = block + payload + b"\r\nPING\r\n"
    op = b"HMSG" if headers else b"MSG"
    fast = _outcome(op + rest + tail, cuts)
    slow = _outcome(op.lower() + rest + tail, cuts)
    assert fast == slow


def _parsed(block: bytes) -> Headers | str:
    """The block parsed, or the error it raised."""
    try:
        return parse_headers(block)
    except ProtocolError as exc:
        return str(exc)


@settings(max_examples=EXAMPLES, deadline=None)
@given(header_fields())
def test_a_plain_header_block_parses_as_the_slow_path_parses_it(fields: bytes) -> None:
    """The same field lines under a status line written with a tab (always parsed line by
    line) give the same fields, or the same error."""
    fast = _parsed(b"NATS/1.0\r\n" + fields)
    slow = _parsed(b"NATS/1.0\t100 Idle\r\n" + fields)
    if isinstance(slow, Headers):
        assert (slow.status, slow.description) == (100, "Idle")
        assert isinstance(fast, Headers) and fast.fields == slow.fields and fast.status is None
    else:
        assert fast == slow


#: What may follow ``NATS/1.0`` and its separator on a status line.
status_rests = st.one_of(
    st.sampled_from(
        [
            *(b"404 No Messages", b"408", b"503", b"100 Idle Heartbeat", b"409 Exceeded  Max"),
            *(b"404 ", b"404  x", b"404\tx", b"40", b"4044", b"40x", b"404 x \t", b"404 \xff", b""),
        ]
    ),
    st.binary(max_size=10),
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(status_rests, header_fields())
def test_a_status_line_parses_as_the_slow_path_parses_it(rest: bytes, fields: bytes) -> None:
    """``NATS/1.0 <rest>`` (the fast path takes what a server writes) and ``NATS/1.0\t<rest>``
    (always parsed line by line) give the same block, or the same error."""
    assert _parsed(b"NATS/1.0 " + rest + b"\r\n" + fields) == _parsed(
        b"NATS/1.0\t" + rest + b"\r\n" + fields
    )


def _hmsg(block: bytes) -> bytes:
    """An HMSG on subject ``a`` carrying ``block`` and no payload."""
    return b"HMSG a 1 %d %d\r\n%s\r\n" % (len(block), len(block), block)


def test_what_the_fast_paths_take_and_what_they_refuse() -> None:
    """Known answers: a server's reply and delivery, each split at every byte; the errors the
    line-by-line parse names for what the fast paths leave to it."""
    block = b"NATS/1.0\r\nNats-Msg-Id: m1\r\nK:\t v \r\n\r\n"
    delivery = b"HMSG journal.r.s 2 $JS.ACK.J.c.1.5.5.0.0 %d %d\r\n%sabc\r\n" % (
        len(block),
        len(block) + 3,
        block,
    )
    answer = b'{"stream":"J","seq":5}   '
    reply = b"MSG _INBOX.x.7 1 %d\r\n%s\r\n" % (len(answer), answer)
    expected = [
        Msg(
            "journal.r.s",
            "2",
            b"abc",
            "$JS.ACK.J.c.1.5.5.0.0",
            Headers(fields=(("Nats-Msg-Id", "m1"), ("K", "v"))),
        ),
        Msg("_INBOX.x.7", "1", answer),
    ]
    data = delivery + reply
    for cut in range(len(data) + 1):
        assert _outcome(data, [cut]) == (expected, None), cut
    refused = {
        b"MSG a 1 99999999999999\r\n": "MSG: size",
        b"HMSG a 1 9 5\r\n": "header size 9 over total size 5",
        b"MSG \xff 1 0\r\n\r\n": "MSG: subject",
        _hmsg(b"NATS/1.0\r\nK:\xff\r\n\r\n"): "header value is not UTF-8",
        _hmsg(b"NATS/1.0\r\nK: v\nw\r\n\r\n"): "",
    }
    for data, named in refused.items():
        events, error = _outcome(data, [])
        if named:
            assert error is not None and named in error, data
        else:  # a lone LF inside a value is the value's, as the line-by-line parse has it
            assert error is None and events == [Msg("a", "1", b"", None, Headers((("K", "v\nw"),)))]


# --- the encoder's fast paths ----------------------------------------------------------------

#: Names and values: plain ones (most often), and each kind the checks refuse.
good_names = st.sampled_from(["Nats-Msg-Id", "K", "Nats-Expected-Last-Subject-Sequence"])
odd_names = st.sampled_from(["", "B d", "Bad:Name", "é", "\ud800", "a\tb", "K\r\n"])
names = st.one_of(good_names, good_names, odd_names, st.text(max_size=6))
good_values = st.sampled_from(["m1", "7", "", "a b", "a\tb", "é"])
odd_values = st.sampled_from([" v", "v ", "\tv", "v\t", "v\r\nX: 1", "\n", "\ud800", "\r"])
values = st.one_of(good_values, good_values, odd_values, st.text(max_size=6))


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.lists(st.tuples(names, values), max_size=4))
def test_a_plain_header_block_encodes_as_the_part_by_part_path_encodes_it(
    fields: list[tuple[str, str]],
) -> None:
    """The same fields under a status line (always encoded part by part) give the same field
    lines, or the same error naming the first part that cannot be sent."""

    def outcome(headers: Headers) -> tuple[bytes, str | None]:
        try:
            return encode_headers(headers).partition(b"\r\n")[2], None
        except ProtocolError as exc:
            return b"", str(exc)

    plain = outcome(Headers(fields=tuple(fields)))
    assert plain == outcome(Headers(fields=tuple(fields), status=100, description="Idle"))
    if plain[1] is None:  # and it parses back to the same fields
        assert parse_headers(b"NATS/1.0\r\n" + plain[0]).fields == tuple(fields)


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.dictionaries(names, values, max_size=4), st.booleans())
def test_headers_given_as_a_mapping_frame_as_the_block_does(
    fields: dict[str, str], with_reply: bool
) -> None:
    """A mapping of fields (what the transport holds its headers in, sent without building a
    ``Headers``) gives the bytes of the block with the same fields in the same order, or the
    same error naming the part that cannot be sent; through the frame's encoder too."""
    block = Headers(fields=tuple(fields.items()))

    def outcome(headers: Headers | dict[str, str]) -> tuple[bytes, bytes, str | None]:
        try:
            return (
                encode_headers(headers),
                ClientProtocol().send_pub("a.b", b"x", "r" if with_reply else None, headers),
                None,
            )
        except ProtocolError as exc:
            return b"", b"", str(exc)

    assert outcome(fields) == outcome(block)


@pytest.mark.parametrize(
    ("subject", "reply", "named"),
    [
        ("a b", None, "PUB: subject 'a b' contains whitespace"),
        ("", None, "PUB: subject is empty"),
        ("a\tb", "r", "PUB: subject 'a\\tb' contains whitespace"),
        ("a", "r s", "PUB: reply 'r s' contains whitespace"),
        ("a", "", "PUB: reply is empty"),
        ("a", " ", "PUB: reply ' ' contains whitespace"),
        ("a", "r\n", "PUB: reply 'r\\n' contains whitespace"),
        ("a\ud800", None, "PUB: subject 'a\\ud800' is not valid UTF-8"),
    ],
)
def test_a_pub_the_fast_path_cannot_frame_is_refused_naming_the_field(
    subject: str, reply: str | None, named: str
) -> None:
    for headers in (None, Headers.of({"K": "v"})):
        with pytest.raises(ProtocolError) as info:
            ClientProtocol().send_pub(subject, b"x", reply, headers)
        assert named in str(info.value).removeprefix("H")


def test_a_pub_with_non_ascii_tokens_is_framed_whole() -> None:
    """Tokens outside ASCII are valid NATS subjects: framed by the part-by-part path."""
    data = ClientProtocol().send_pub("é.x", b"x", "r.é", Headers.of({"K": "v"}))
    parser = Parser()
    parser.receive_data(data)
    assert list(parser.events()) == [Pub("é.x", b"x", "r.é", Headers.of({"K": "v"}))]
