"""The request mux's routing of replies, without a socket: the first reply for a request wins
and takes the request out (the answered caller has nothing to forget), a later or stray reply
is dropped, and forgetting is for requests left unanswered."""

from __future__ import annotations

import math

from dagnats_trio.nats import Msg
from dagnats_trio.nats._mux import RequestMux


def _reply(subject: str, payload: bytes) -> Msg:
    return Msg(subject, "1", payload)


def test_the_first_reply_wins_and_takes_its_request_out() -> None:
    mux = RequestMux()
    first_token, first_subject, first = mux.open(math.inf)
    second_token, _, second = mux.open(math.inf)
    assert mux.pending == 2

    mux.deliver(_reply(first_subject, b"one"))
    assert first.woken and first.msg is not None and first.msg.payload == b"one"
    assert not second.woken and second.msg is None
    assert mux.pending == 1  # answered: no longer waiting, without a forget

    mux.deliver(_reply(first_subject, b"again"))  # a late duplicate: dropped
    assert first.msg.payload == b"one"
    assert mux.pending == 1
    mux.forget(first_token)  # forgetting an answered request changes nothing
    assert mux.pending == 1

    mux.deliver(_reply(f"{first_subject}x", b"stray"))  # no such request
    assert not second.woken and mux.pending == 1

    mux.forget(second_token)  # unanswered (timed out, cancelled): forgotten
    assert mux.pending == 0
    mux.deliver(_reply(first_subject.rpartition(".")[0] + "." + second_token, b"late"))
    assert second.msg is None  # its late reply is dropped


def test_no_reply_reaches_an_alarm() -> None:
    """An alarm's token holds a space, which no subject token a server sends does: a reply on
    the token's number (or any other) never takes the alarm's slot, nor its count."""
    mux = RequestMux()
    token, slot = mux.alarm(math.inf)
    _, subject, _ = mux.open(math.inf)
    prefix = subject.rpartition(".")[0]
    mux.deliver(_reply(f"{prefix}.{token.split()[-1]}", b"x"))
    assert not slot.woken and slot.msg is None
    assert mux.pending == 1
    mux.disarm(token)
