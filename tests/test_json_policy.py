"""The one JSON policy and the one integer parser, as pure functions (no server needed)."""

from __future__ import annotations

import cProfile
import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dagnats_trio.dag import DurationError, parse_duration_text
from dagnats_trio.protocol import (
    MAX_JSON_DEPTH,
    JsonPolicyError,
    check_json,
    decode_json,
    encode_json,
    parse_decimal,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children),
    max_leaves=20,
)


@given(json_values)
def test_json_values_round_trip(value: Any) -> None:
    data = encode_json(value)
    assert decode_json(data) == value
    assert json.loads(data) == value
    assert decode_json(json.dumps(value)) == value


@given(st.text())
def test_decoding_any_text_is_a_value_or_a_policy_error(text: str) -> None:
    try:
        value = decode_json(text)
    except JsonPolicyError as exc:
        assert exc.where == "body"
        return
    check_json(value)
    assert decode_json(encode_json(value)) == value


@given(st.binary())
def test_decoding_any_bytes_is_a_value_or_a_policy_error(data: bytes) -> None:
    try:
        value = decode_json(data)
    except JsonPolicyError:
        return
    encode_json(value).decode("utf-8")


@pytest.mark.parametrize(
    ("data", "where", "reason"),
    [
        (b'{"a": NaN}', "body.a", "NaN is not a JSON number"),
        (b'{"a": [0, Infinity]}', "body.a[1]", "Infinity is not a JSON number"),
        (b"[-Infinity]", "body[0]", "-Infinity is not a JSON number"),
        (b'{"a": {"b": 1e400}}', "body.a.b", "1e400 is not a JSON number"),
        (b'{"a": -1e400}', "body.a", "-1e400 is not a JSON number"),
        (b'{"n": 9223372036854775808}', "body.n", "outside the signed 64-bit range"),
        (b'{"s": "\\ud800"}', "body.s", "lone surrogate"),
        (b'["x", "\\udfff"]', "body[1]", "lone surrogate"),
        (b'{"\\ud800": 1}', "body", "object key holds a lone surrogate"),
        (b'{"s": "\xed\xa0\x80"}', "body", "not valid UTF-8 (at byte 7)"),
        (b"\xff", "body", "not valid UTF-8"),
        (b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "body", "nested deeper"),
        (b"[" * 100_000, "body", "nested deeper"),
        (b'{"a": 1', "body", "not valid JSON"),
        (b"1" * 5_000, "body", "not valid JSON"),
    ],
)
def test_values_outside_the_policy_are_refused_naming_where(
    data: bytes, where: str, reason: str
) -> None:
    with pytest.raises(JsonPolicyError) as info:
        decode_json(data)
    assert info.value.where.startswith(where), info.value
    assert reason in info.value.reason


def test_what_stays_inside_the_policy() -> None:
    assert decode_json(b'"\\ud83d\\ude00"') == "\U0001f600"  # a surrogate pair is one character
    assert decode_json(b"[1e308, -9223372036854775808, 9223372036854775807]") == [
        1e308,
        -(2**63),
        2**63 - 1,
    ]
    nested: Any = []
    for _ in range(MAX_JSON_DEPTH - 1):
        nested = [nested]
    assert decode_json(json.dumps(nested)) == nested


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"a": math.nan}, "value.a"),
        ([math.inf], "value[0]"),
        ({"k": ["\ud800"]}, "value.k[0]"),
        ({1: "x"}, "value"),
        ({"a": {1, 2}}, "value.a"),
        (2**64, "value"),
    ],
)
def test_python_values_outside_the_policy_are_refused(value: Any, where: str) -> None:
    with pytest.raises(JsonPolicyError) as info:
        encode_json(value)
    assert info.value.where == where


@given(st.text(max_size=8), st.integers(0, 10), st.integers(0, 10**6))
def test_parse_decimal_takes_ascii_digits_within_bounds_only(
    text: str, low: int, span: int
) -> None:
    high = low + span
    try:
        value = parse_decimal(text, low=low, high=high)
    except ValueError as exc:
        assert str(exc) == f"must be an integer from {low} to {high}"
        ok = text.isascii() and text.isdigit() and low <= int(text) <= high
        assert not ok or len(text) > len(str(high))
        return
    assert text.isascii() and text.isdigit()
    assert value == int(text)
    assert low <= value <= high


@pytest.mark.parametrize("text", ["²", "٣", "\uff15", "+5", " 5", "5 ", "1_0", "-1", "0x1", ""])
def test_parse_decimal_refuses_what_int_would_take_or_choke_on(text: str) -> None:
    with pytest.raises(ValueError, match="must be an integer from 0 to 100"):
        parse_decimal(text, low=0, high=100)


@pytest.mark.parametrize("text", ["²", "٣s", "\uff15ms", "1_0s", "-5"])
def test_durations_as_text_take_ascii_digits_only(text: str) -> None:
    with pytest.raises(DurationError):
        parse_duration_text(text)
    assert parse_duration_text("250") == 250
    assert parse_duration_text("1m30s") == 90_000


def test_text_with_a_raw_lone_surrogate_is_refused_naming_where() -> None:
    with pytest.raises(JsonPolicyError) as info:
        decode_json('{"a": ["ok", "\ud800"]}')
    assert info.value.where == "body.a[1]"
    with pytest.raises(JsonPolicyError, match=r"^body\[[01]\]: "):  # either is a refusal
        decode_json('["\ud800", NaN]')


# --- the walk's exact kinds (issue 12 goal 3) -------------------------------------------------


class _Float(float):
    pass


def _reference_ok(value: Any, depth: int = 1) -> bool:
    """The policy's rules written plainly (recursion, ``isinstance`` everywhere): the oracle
    the walk's fast tests of exact kinds must agree with."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        return not any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, int):
        return -(2**63) <= value <= 2**63 - 1
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict | list | tuple):
        if depth > MAX_JSON_DEPTH:
            return False
        if isinstance(value, dict):
            if not all(type(k) is str and _reference_ok(k) for k in value):
                return False
            value = list(value.values())
        return all(_reference_ok(v, depth + 1) for v in value)
    return False


_odd_scalars = st.one_of(
    st.floats(),
    st.builds(_Float, st.floats()),
    st.integers(-(2**65), 2**65),
    st.text(max_size=3),
    st.sampled_from(["\udc00", "é", math.nan, -math.inf, -0.0, 1e308, None, True, b"x"]),
)
_odd_values = st.recursive(
    _odd_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=2), st.integers(0, 2)), inner, max_size=3),
    ),
    max_leaves=12,
)


@given(_odd_values)
def test_the_walk_refuses_exactly_what_the_rules_refuse(value: Any) -> None:
    try:
        check_json(value)
        ok = True
    except JsonPolicyError:
        ok = False
    assert ok == _reference_ok(value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, _Float("nan")])
def test_a_float_that_is_not_finite_is_refused_naming_where(bad: float) -> None:
    with pytest.raises(JsonPolicyError, match="is not a JSON number") as info:
        check_json({"a": [1.5, bad]}, where="input")
    assert info.value.where == "input.a[1]"


#: ``isinstance`` and ``_check_scalar`` calls per check of a plain value (dicts, lists, strings,
#: numbers): 53 for this one (45 ``isinstance``, 8 ``_check_scalar``) while every popped
#: container was tested with ``isinstance`` and every float went to ``_check_scalar`` (the value
#: itself too); none since the exact kinds are told apart by ``type(x) is`` and a float is
#: finite when ``x - x == 0.0``.
MAX_KIND_CALLS_PER_PLAIN_CHECK = 0


def test_checking_a_plain_value_costs_no_isinstance_nor_scalar_call() -> None:
    value = {"messages": [{"role": "user", "n": 1.5, "k": [2.5, None, True]}] * 3, "x": 0.25}
    check_json(value)
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        check_json(value)
    finally:
        profiler.disable()
    profiler.create_stats()
    stats: dict[tuple[str, int, str], Any] = profiler.stats  # type: ignore[attr-defined]
    calls = {
        name: figures[1]
        for (filename, _line, name), figures in stats.items()
        if name in ("<built-in method builtins.isinstance>", "_check_scalar")
    }
    print(f"isinstance and _check_scalar calls per check of a plain value: {calls}")
    assert sum(calls.values()) <= MAX_KIND_CALLS_PER_PLAIN_CHECK
