"""A plain publish ack is read without the JSON decoder (issue 12 goal 3), and reads the same.

Every journal append, snapshot save and task publish waits on a publish ack; the fast path reads
its sequence with one anchored match, and any answer it does not fully match (an error, a field
it does not know) goes to the JSON decoder as before.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.nats import open_connection
from dagnats_trio.protocol.layout import JOURNAL_STREAM, journal_subject
from dagnats_trio.transport import TrioNatsTransport
from dagnats_trio.transport._jetstream_wire import (
    EXPECTED_LAST_SUBJECT_SEQ,
    MSG_ID,
    plain_pub_ack_seq,
)

EXAMPLES = settings(deadline=None, max_examples=200)
_names = st.text(max_size=12)
_seqs = st.integers(0, 2**63 - 1)


def _spell(ack: dict[str, Any]) -> bytes:
    """As nats-server writes an ack: compact, in its field order."""
    return json.dumps(ack, separators=(",", ":"), ensure_ascii=False).encode()


@EXAMPLES
@given(stream=_names, domain=st.none() | _names, seq=_seqs, duplicate=st.booleans())
def test_every_plain_ack_reads_as_json_reads_it(
    stream: str, domain: str | None, seq: int, duplicate: bool
) -> None:
    ack: dict[str, Any] = {"stream": stream}
    if domain is not None:
        ack["domain"] = domain
    ack["seq"] = seq
    if duplicate:
        ack["duplicate"] = True
    data = _spell(ack)
    if duplicate and seq % 2:
        data = data.replace(b'"duplicate":true', b'"duplicate": true')  # the server's spelling
    got = plain_pub_ack_seq(data)
    # A name with an escape or a control character goes to the decoder; any other is read.
    plain_names = all(
        '"' not in n and "\\" not in n and n.isprintable() for n in (stream, domain or "")
    )
    if plain_names:
        assert got == seq
    if got is not None:
        assert got == json.loads(data)["seq"]


_fields = st.sampled_from(["stream", "domain", "seq", "duplicate", "error", "batch", "val"])
_values = st.none() | st.booleans() | st.integers(-5, 2**64) | st.floats() | _names


@EXAMPLES
@given(ack=st.dictionaries(_fields, _values, max_size=5), noise=st.binary(max_size=3))
def test_the_fast_path_answers_only_what_json_answers_the_same(
    ack: dict[str, Any], noise: bytes
) -> None:
    for data in (_spell(ack), _spell(ack) + noise, noise + _spell(ack)):
        got = plain_pub_ack_seq(data)
        if got is None:
            continue
        parsed = json.loads(data)
        assert set(parsed) <= {"stream", "domain", "seq", "duplicate"}
        assert parsed["seq"] == got
        assert "error" not in parsed


def test_errors_and_unknown_fields_go_to_the_decoder() -> None:
    assert plain_pub_ack_seq(b'{"stream":"S","seq":7}') == 7
    assert plain_pub_ack_seq(b'{"stream":"S","domain":"hub","seq":7,"duplicate":true}') == 7
    assert plain_pub_ack_seq(b'{"stream":"S","seq":7,"duplicate": true}') == 7
    assert plain_pub_ack_seq(b'{"stream":"S","seq":7,"duplicate": false}') is None
    assert plain_pub_ack_seq(b'{"error":{"code":400,"err_code":10071,"description":"x"}}') is None
    assert plain_pub_ack_seq(b'{"stream":"S","seq":7,"batch":"b","count":2}') is None
    assert plain_pub_ack_seq(b'{"stream":"S","seq":07}') is None  # not JSON
    assert plain_pub_ack_seq(b'{"stream":"S","seq":7} ') is None


async def test_the_servers_own_acks_take_the_fast_path(
    nats_url: str, trio_transport: TrioNatsTransport
) -> None:
    """What nats-server answers to a publish (stored, duplicate, refused), read raw."""
    run = f"puback{secrets.token_hex(4)}"
    subject = journal_subject(run, "s")
    async with open_connection(nats_url) as client:
        first = (await client.request(subject, b"a", headers={MSG_ID: f"{run}-1"})).payload
        again = (await client.request(subject, b"a", headers={MSG_ID: f"{run}-1"})).payload
        stored = json.loads(first)
        wrong_tail = {EXPECTED_LAST_SUBJECT_SEQ: str(stored["seq"] + 1)}
        refused = (await client.request(subject, b"b", headers=wrong_tail)).payload
    assert stored["stream"] == JOURNAL_STREAM
    assert plain_pub_ack_seq(first) == stored["seq"] > 0
    assert json.loads(again)["duplicate"] is True
    assert plain_pub_ack_seq(again) == stored["seq"]
    assert "error" in json.loads(refused)
    assert plain_pub_ack_seq(refused) is None
    # Through the transport: the same sequence, the duplicate answered with the stored one.
    seq = await trio_transport.publish(subject, b"c", msg_id=f"{run}-2")
    assert seq > stored["seq"]
    assert await trio_transport.publish(subject, b"c", msg_id=f"{run}-2") == seq
