"""The codec's fast paths (issue 12 item 3) keep the wire bytes and the policy unchanged.

A ``JsonValue`` field is handed to the JSON encoder as it is (no walk of cattrs' dispatch over
every element); what such a field may hold that is not plain JSON is still unstructured by its
own type. The policy check that replaced a canonical spelling where the spelling was unused
walks containers of every kind, subclasses too.
"""

from __future__ import annotations

import collections
import cProfile
import enum
import json
import math
import sys
from typing import Any, Final, NamedTuple

import attrs
import pytest
from cattrs.fns import identity
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.protocol import (
    CommitAction,
    CommitRecord,
    DecodedByBytes,
    DecodeError,
    DispatchId,
    JsonPolicyError,
    ModelRecord,
    StepContinue,
    TaskMessage,
    Wait,
    canonical_json_text,
    check_json,
    converter,
    decode_event,
    decode_record,
    decode_task,
    dumps_json,
    encode_event,
    encode_json,
    encode_record,
    encode_task,
    from_obj,
    loads_json,
)


def test_a_json_value_field_is_handed_on_as_it_is() -> None:
    state = {"messages": [{"role": "user", "content": "hi"}], "n": [1, 2.5, None, True]}
    assert converter.unstructure(state, unstructure_as=Any) is state
    rec = CommitRecord(1, 1, "c", "n", CommitAction.CONTINUE, state=state)
    raw = converter.unstructure(rec)
    assert raw["state"] is state
    data = encode_record(rec)
    assert json.loads(data)["state"] == state
    assert decode_record(data) == rec


@attrs.frozen
class _Point:
    x: int
    y: int


class _Colour(enum.Enum):
    RED = "red"


class _Pair(NamedTuple):
    a: int
    b: str


def test_what_is_not_plain_json_in_a_json_field_is_still_unstructured() -> None:
    response = {"at": _Point(1, 2), "colours": [_Colour.RED], "pair": _Pair(1, "b"), "t": (1,)}
    data = encode_record(ModelRecord(0, 1, "c", 0, response))
    assert json.loads(data)["response"] == {
        "at": {"x": 1, "y": 2},
        "colours": ["red"],
        "pair": [1, "b"],
        "t": [1],
    }


def test_an_object_no_converter_knows_is_still_an_error() -> None:
    with pytest.raises(TypeError):
        encode_record(ModelRecord(0, 1, "c", 0, {"x": object()}))


@pytest.mark.parametrize(
    "value",
    [
        {"a": collections.OrderedDict(x=math.nan)},
        [_Pair(1, "b"), _Pair(2, "\ud800")],
        {"a": collections.OrderedDict({1: "non-string key"})},
    ],
)
def test_the_policy_walks_container_subclasses(value: Any) -> None:
    with pytest.raises(JsonPolicyError):
        check_json(value)


def test_plain_containers_pass_the_policy() -> None:
    check_json({"a": collections.OrderedDict(x=[1, 2.5, "s", None, True])})


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":[1,2.5,"\\u00e9\xc3\xa9"],"b":null}',
        b'{"lone":"\\ud800"}',
        b"\xef\xbb\xbf{}",
        '{"x":1}'.encode("utf-16-le"),
        '{"x":1}'.encode("utf-16"),
        b"[1]",
        b"{",
        b'{"a":1} x',
        b"{\xff}",
        b"",
    ],
)
def test_loads_json_answers_and_fails_as_json_loads(data: bytes) -> None:
    try:
        expected: Any = ("ok", json.loads(data))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        expected = ("error", type(exc), str(exc))
    try:
        got: Any = ("ok", loads_json(data))
    except ValueError as exc:
        got = ("error", type(exc), str(exc))
    assert got == expected


# --- optional scalars (issue 12 goal 3) -------------------------------------------------------


@attrs.frozen
class _Optionals:
    s: str | None = None
    i: int | None = None
    f: float | None = None
    b: bool | None = None
    later: None | int = None  # noqa: RUF036 (the order a union may come in)
    colour: _Colour | None = None
    point: _Point | None = None


@pytest.mark.parametrize("tp", [str | None, int | None, float | None, bool | None, None | int])
def test_an_optional_scalar_is_read_as_it_is(tp: Any) -> None:
    """cattrs inlines its own ``identity`` in the functions it generates: an optional scalar
    field costs an attribute read, not two calls."""
    assert converter.get_unstructure_hook(tp) is identity
    assert converter.get_unstructure_hook(Any) is identity
    assert converter.get_unstructure_hook(_Colour | None) is not identity
    assert converter.get_unstructure_hook(_Point | None) is not identity


@settings(deadline=None, max_examples=100)
@given(
    s=st.none() | st.text(max_size=5),
    i=st.none() | st.integers(),
    f=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    b=st.none() | st.booleans(),
    later=st.none() | st.integers(),
    colour=st.none() | st.just(_Colour.RED),
    point=st.none() | st.builds(_Point, st.integers(), st.integers()),
)
def test_optional_fields_round_trip(**fields: Any) -> None:
    value = _Optionals(**fields)
    raw = converter.unstructure(value)
    assert raw == {
        **fields,
        "colour": None if value.colour is None else "red",
        "point": None if value.point is None else attrs.asdict(value.point),
    }
    assert from_obj(json.loads(json.dumps(raw)), _Optionals) == value


@pytest.mark.parametrize(
    ("field", "wrong"),
    [("s", 5), ("i", "5"), ("i", True), ("i", 1.5), ("f", "1"), ("f", False), ("b", 1),
     ("later", "x"), ("colour", "blue"), ("point", [1, 2])],
)  # fmt: skip
def test_an_optional_scalar_of_the_wrong_json_type_is_refused(field: str, wrong: Any) -> None:
    with pytest.raises(DecodeError, match=rf"expected .* @ \$\.{field}$"):
        from_obj({field: wrong}, _Optionals)
    assert from_obj({field: None}, _Optionals) == _Optionals()


def test_an_optional_object_is_structured_by_a_hook_bound_once() -> None:
    """``DispatchId | None`` and the like: the inner type's hook is looked up once, when the
    optional's hook is made; cattrs' own optional hook (``_structure_optional``) dispatched on
    the inner type on every value decoded. The answers are the same: None as it is, an object
    by the inner hook, anything else refused naming the field."""
    event = StepContinue("r1", "agent", DispatchId(2, 1, "n1"), wait=Wait(delay_ms=5))
    data = encode_event(event)
    assert decode_event(data) == event  # warm
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        decoded = decode_event(data)
    finally:
        profiler.disable()
    assert decoded == event
    profiler.create_stats()
    stats: dict[tuple[str, int, str], Any] = profiler.stats  # type: ignore[attr-defined]
    dispatched = [key for key in stats if key[2] == "_structure_optional"]
    assert dispatched == []
    assert decode_event(encode_event(StepContinue("r1", "agent"))) == StepContinue("r1", "agent")
    raw = json.loads(data)
    raw["dispatch"] = "n1"
    with pytest.raises(DecodeError, match=r"dispatch"):
        decode_event(json.dumps(raw).encode())


#: Built-in calls the codec's own hooks make while one task message is decoded (its strings,
#: integers, its dispatch identity): 16 while every scalar was tested with ``isinstance`` (two
#: for an integer) and each object's structuring function was found with ``dict.get``; 0 since
#: the exact JSON type is tested first (``type(v) is int``) and the function found by subscript.
MAX_HOOK_BUILTIN_CALLS_PER_TASK: Final = 2


def _profiled_task_decode(
    loop_state_max_bytes: int | None,
) -> tuple[bytes, dict[tuple[str, int, str], tuple[int, int, float, float, dict[Any, Any]]]]:
    """A task message's bytes, and the profile of one decode of them (after a warm-up decode,
    which generates the structuring functions); the decode must give the task back."""
    task = TaskMessage(
        run_id="r1",
        step_id="agent",
        task="scripted-agent",
        workflow="w",
        dispatch=DispatchId(iteration=3, attempt=1, nonce="n1"),
        input={"task": "deploy"},
        journal_seq=12,
        loop_state_max_bytes=loop_state_max_bytes,
        is_loop=True,
    )
    data = encode_task(task)
    assert decode_task(data) == task  # warm
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        decoded = decode_task(data)
    finally:
        profiler.disable()
    assert decoded == task
    profiler.create_stats()
    return data, profiler.stats  # type: ignore[attr-defined]


def test_decoding_a_task_message_costs_its_hooks_no_builtin_calls() -> None:
    data, stats = _profiled_task_decode(None)
    calls = sum(
        count[1]
        for key, (_cc, _nc, _tt, _ct, callers) in stats.items()
        if key[0] == "~"
        for caller, count in callers.items()
        if caller[0].replace("\\", "/").endswith("dagnats_trio/protocol/_codec.py")
        and caller[2] in {"_strict_str", "_strict_int", "_strict_bool", "hook"}
    )
    print(f"built-in calls of the codec's hooks per task message decoded: {calls}")
    assert calls <= MAX_HOOK_BUILTIN_CALLS_PER_TASK
    # and the strict rules still hold for what is not the exact type
    for field, wrong in (("journal_seq", True), ("run_id", 5), ("is_loop", 1)):
        raw = json.loads(data)
        raw[field] = wrong
        with pytest.raises(DecodeError, match=field):
            decode_task(json.dumps(raw).encode())


# --- dumps_json and loads_json answer as json does (issue 12 goal 3) --------------------------

#: ``JSONEncoder.encode`` with the options of ``dumps_json``, which ``dumps_json`` must agree with,
#: answer for answer and error for error.
_JSON_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class _Str(str):
    pass


class _Int(enum.IntEnum):
    ONE = 1


#: Scalars as JSON and Python hold them, and the odd ones the encoder still takes (or refuses
#: the same way): not finite, beyond 64 bits, lone surrogates, subclasses.
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63, max_value=2**70),
    st.floats(),
    st.text(max_size=6),
    st.sampled_from(["\ud800", 'é\x00"\\/\u2028', _Str("s"), _Int.ONE, -0.0, 1e400]),
)
#: Object keys: strings, and what the encoder turns into one (numbers, booleans, null).
_keys = st.one_of(st.text(max_size=4), st.integers(-3, 3), st.floats(), st.booleans(), st.none())
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(_keys, inner, max_size=4),
        st.dictionaries(st.text(max_size=3), inner, max_size=3).map(collections.OrderedDict),
    ),
    max_leaves=20,
)


def _outcome(fn: Any, *args: Any) -> tuple[Any, ...]:
    try:
        return ("ok", fn(*args))
    except (ValueError, TypeError, RecursionError) as exc:
        return ("error", type(exc), str(exc))


@settings(deadline=None, max_examples=300)
@given(value=_values)
def test_dumps_json_writes_what_the_json_encoder_writes(value: Any) -> None:
    assert _outcome(dumps_json, value) == _outcome(_JSON_ENCODER.encode, value)


def test_dumps_json_still_refuses_a_circular_value_as_the_encoder_does() -> None:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    got = _outcome(dumps_json, loop)
    assert got == _outcome(_JSON_ENCODER.encode, loop)
    assert got == ("error", ValueError, "Circular reference detected")
    assert dumps_json([1, {"a": "b"}]) == '[1,{"a":"b"}]'  # and the next value is fine


def test_dumps_json_answers_nesting_past_the_recursion_limit_as_the_encoder_does() -> None:
    """``dumps_json`` writes without the encoder's circular-reference check first; nesting too
    deep to write (as a cycle is) then goes to the encoder that checks, whose answer it gives.
    A value shared twice (not a cycle) is written twice, as the checking encoder writes it."""
    deep: list[Any] = []
    for _ in range(sys.getrecursionlimit() + 100):
        deep = [deep]
    got = _outcome(dumps_json, deep)
    assert got == _outcome(_JSON_ENCODER.encode, deep)
    assert got[:2] == ("error", RecursionError)
    shared = {"k": [1, 2]}
    assert dumps_json([shared, {"again": shared}]) == '[{"k":[1,2]},{"again":{"k":[1,2]}}]'


#: What may follow (or replace the end of) an object's text: whitespace, which is allowed, and
#: anything else, which is an error (json's own message, position included).
_tails = st.sampled_from(["", " ", "\n\t\r ", " x", "}", "1", "{}", " \n]", "\x00"])


@settings(deadline=None, max_examples=300)
@given(
    value=st.dictionaries(st.text(max_size=3), _values, max_size=4),
    cut=st.integers(0, 1000),
    cut_it=st.booleans(),
    tail=_tails,
    spaced=st.booleans(),
)
def test_loads_json_reads_what_json_loads_reads(
    value: dict[str, Any], cut: int, cut_it: bool, tail: str, spaced: bool
) -> None:
    text = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":"))
    if cut_it:
        text = text[: cut % (len(text) + 1)]
    data = (text + tail).encode("utf-8", "surrogatepass")
    assert _outcome(loads_json, data) == _outcome(json.loads, data)


#: Calls of json's Python layer (``JSONEncoder.encode`` and ``iterencode``, ``JSONDecoder.decode``
#: and ``raw_decode``) per journal record encoded and decoded: 4 while a decode went through
#: ``decode``; 3 since the documented ``raw_decode`` reads a text with nothing after its value.
#: (Calling json's C encoder and scanner directly would make it 0, but they are not json's
#: documented API.)
MAX_JSON_PYTHON_CALLS_PER_RECORD: Final = 3


def test_a_record_encoded_and_decoded_costs_few_calls_of_jsons_python_layer() -> None:
    record = CommitRecord(
        2, 1, "claim-1", "n1", CommitAction.CONTINUE, state=[{"role": "user", "content": "hi"}]
    )
    assert decode_record(encode_record(record)) == record  # warm
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        decoded = decode_record(encode_record(record))
    finally:
        profiler.disable()
    assert decoded == record
    profiler.create_stats()
    stats: dict[tuple[str, int, str], Any] = profiler.stats  # type: ignore[attr-defined]
    calls = {
        f"{key[0].rsplit('/', 1)[-1]}:{key[2]}": figures[1]
        for key, figures in stats.items()
        if key[0].replace("\\", "/").endswith(("/json/encoder.py", "/json/decoder.py"))
    }
    print(f"calls of json's Python layer per record encoded and decoded: {calls}")
    assert sum(calls.values()) <= MAX_JSON_PYTHON_CALLS_PER_RECORD


# --- decoded values kept by their bytes (issue 12 goal 3) -------------------------------------


def test_a_value_is_decoded_once_per_bytes_and_the_keys_are_bounded() -> None:
    kept: DecodedByBytes[DispatchId] = DecodedByBytes(DispatchId, "dispatch", max_entries=2)
    one = b'{"iteration":1,"attempt":1,"nonce":"a"}'
    first = kept.decode("x", one)
    assert first == DispatchId(1, 1, "a")
    assert kept.decode("x", bytes(one)) is first  # equal bytes: the kept value, shared
    assert kept.decodes == 1
    two = b'{"iteration":2,"attempt":1,"nonce":"a"}'
    assert kept.decode("x", two) == DispatchId(2, 1, "a")  # other bytes: decoded again
    assert kept.decodes == 2
    with pytest.raises(DecodeError, match="not a valid dispatch"):
        kept.decode("x", b'{"iteration":"2"}')
    assert kept.decode("x", two) == DispatchId(2, 1, "a") and kept.decodes == 3  # still kept
    kept.decode("y", one)
    kept.decode("z", one)  # a third key: the oldest ("x") is dropped
    assert kept.decodes == 5
    kept.decode("x", two)
    assert kept.decodes == 6
    kept.forget("x")
    kept.decode("x", two)
    assert kept.decodes == 7
    with pytest.raises(ValueError, match="max_entries"):
        DecodedByBytes(DispatchId, "dispatch", max_entries=0)


# --- the policy's encodings on encoders built once (issue 12 goal 3) ---------------------------


def _policy_outcome(fn: Any, value: Any) -> tuple[Any, ...]:
    try:
        return ("ok", fn(value))
    except (ValueError, TypeError, RecursionError) as exc:
        return ("error", type(exc), str(exc))


def _canonical_before(value: Any) -> str:
    """``journal.canonical_json`` before it used an encoder built once."""
    check_json(value)
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def _encode_json_before(value: Any) -> bytes:
    check_json(value)
    encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return encoder.encode(value).encode("utf-8")


@settings(deadline=None, max_examples=300)
@given(value=_values)
def test_the_policys_encodings_are_the_json_encoders(value: Any) -> None:
    assert _policy_outcome(canonical_json_text, value) == _policy_outcome(_canonical_before, value)
    assert _policy_outcome(encode_json, value) == _policy_outcome(_encode_json_before, value)


#: Calls of json's Python layer (``dumps``, ``JSONEncoder.__init__``, ``encode``,
#: ``iterencode``) per tool input spelled canonically and per value encoded by the policy: 6
#: while ``canonical_json`` called ``json.dumps`` with options (a new encoder per call); 4 since
#: both call ``encode`` on an encoder built once (two calls each).
MAX_JSON_PYTHON_CALLS_PER_POLICY_ENCODE: Final = 4


def test_the_policys_encodings_cost_few_calls_of_jsons_python_layer() -> None:
    value = {"to": "ops", "text": "deploying", "n": [1, 2.5, None, True]}
    expected = '{"n":[1,2.5,null,true],"text":"deploying","to":"ops"}'
    assert canonical_json_text(value) == expected
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        text = canonical_json_text(value)
        data = encode_json(value)
    finally:
        profiler.disable()
    assert text == expected
    assert json.loads(data) == value
    profiler.create_stats()
    stats: dict[tuple[str, int, str], Any] = profiler.stats  # type: ignore[attr-defined]
    calls = {
        f"{key[0].rsplit('/', 1)[-1]}:{key[2]}": figures[1]
        for key, figures in stats.items()
        if key[0].replace("\\", "/").endswith(("/json/__init__.py", "/json/encoder.py"))
    }
    print(f"calls of json's Python layer per canonical spelling and policy encode: {calls}")
    assert sum(calls.values()) <= MAX_JSON_PYTHON_CALLS_PER_POLICY_ENCODE


#: Calls (Python functions and built-ins) per task message decoded: 28 while an optional
#: integer field called the strict hook after the None test, and the bytes and the object were
#: tested with ``isinstance``; 24 since None or the exact JSON type is the answer as it is and
#: the exact ``bytes`` and ``dict`` are told apart by ``type(x) is`` and json's C scanner was
#: called directly; 25 with json's documented ``raw_decode`` in its place (the scanner is not
#: json's public API).
MAX_CALLS_PER_TASK_DECODED: Final = 25


def test_decoding_a_task_message_costs_few_calls() -> None:
    data, stats = _profiled_task_decode(1_048_576)
    calls = sum(figures[1] for key, figures in stats.items() if "disable" not in key[2])
    print(f"calls per task message decoded: {calls}")
    assert calls <= MAX_CALLS_PER_TASK_DECODED
    # The optional integers keep their strict rule for anything but None and an integer.
    for field, wrong in (
        ("journal_seq", True),
        ("loop_state_max_bytes", "5"),
        ("journal_seq", 1.0),
    ):
        raw = json.loads(data)
        raw[field] = wrong
        with pytest.raises(DecodeError, match=field):
            decode_task(json.dumps(raw).encode())
