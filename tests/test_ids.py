"""The one id validator and the request id encoding (pure: no server needed)."""

from __future__ import annotations

import re
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.protocol import (
    InvalidId,
    check_id,
    check_request_id,
    is_id,
    is_request_id,
    request_id_from_token,
    request_id_token,
)

#: The rules as the docs state them, written out again here as the tests' oracle.
TOKEN_RULE = re.compile(r"[A-Za-z0-9_-]{1,128}")
KEY_SAFE = re.compile(r"[-_=A-Za-z0-9]+")
REFUSED = {"Cc", "Cs", "Zl", "Zp"}
#: Examples per property (pure functions: twice Hypothesis's default); the edge cases the rules
#: turn on are listed by hand too (test_check_id_refuses_naming_the_field and the chat ids).
MAX_EXAMPLES = 200

any_text = st.text(
    alphabet=st.characters(codec=None),  # every code point, lone surrogates included
    max_size=140,
)
near_tokens = st.from_regex(r"[A-Za-z0-9_-]{1,128}\n?", fullmatch=True)


def printable_oracle(s: str) -> bool:
    return 1 <= len(s) <= 128 and not any(unicodedata.category(c) in REFUSED for c in s)


@pytest.mark.parametrize(
    "bad", ["noop\n", "x\n", "a.b", "a b", "*", ">", "", "x" * 129, "é", "a\r", "\n"]
)
def test_check_id_refuses_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidId) as info:
        check_id("task", bad)
    assert info.value.field == "task" and info.value.code == "invalid_task"
    assert str(info.value).startswith("task ")
    assert "\n" not in str(info.value)  # one line, whatever the value held


def test_check_id_accepts_tokens() -> None:
    for good in ("a", "noop", "A-b_9", "x" * 128):
        assert check_id("run_id", good) == good


@settings(max_examples=MAX_EXAMPLES, database=None)
@given(st.one_of(any_text, near_tokens))
def test_is_id_is_a_full_match(s: str) -> None:
    assert is_id(s) == (TOKEN_RULE.fullmatch(s) is not None)


@settings(max_examples=MAX_EXAMPLES, database=None)
@given(any_text)
def test_request_ids_are_refused_only_when_not_printable(s: str) -> None:
    assert is_request_id(s) == printable_oracle(s)
    if not printable_oracle(s):
        with pytest.raises(InvalidId) as info:
            check_request_id(s)
        assert info.value.code == "invalid_request_id"


@settings(max_examples=MAX_EXAMPLES, database=None)
@given(any_text.filter(printable_oracle), any_text.filter(printable_oracle))
def test_request_id_token_is_injective_key_safe_and_reversible(a: str, b: str) -> None:
    ta, tb = request_id_token(a), request_id_token(b)
    assert KEY_SAFE.fullmatch(ta), ta  # one token: no dot, no wildcard, no space
    assert (ta == tb) == (a == b)
    assert request_id_from_token(ta) == a
    assert request_id_token(a) == ta  # stable


@settings(max_examples=MAX_EXAMPLES, database=None)
@given(near_tokens.filter(lambda s: TOKEN_RULE.fullmatch(s) is not None))
def test_request_ids_valid_before_keep_their_key(s: str) -> None:
    assert request_id_token(s) == s


def test_request_id_examples_from_chat_systems() -> None:
    ids = [
        "slack:C024BE91L:1700000000.000200",
        "discord.123.456",
        "a*b>c",
        "two words",
        "émoji 👋",
        "..",
        "a/b",
        "a",
        "=YQ",  # the encoding of "a" would be "=YQ" if "a" were encoded: it is not
        "x" * 128,
    ]
    tokens = [request_id_token(i) for i in ids]
    assert len(set(tokens)) == len(ids)
    assert tokens[ids.index("a")] == "a"
    for bad in ("a\nb", "\x00", "\x7f", "\u2028", "\ud800", "", "x" * 129):
        assert not is_request_id(bad), repr(bad)
