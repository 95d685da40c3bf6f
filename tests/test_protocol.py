"""Wire shapes: every class survives encode -> decode, and a malformed message is a DecodeError.

Strategies are derived from the attrs field types, so a field added to a protocol class is
covered without touching this file (a type the derivation does not know fails loudly).
"""

from __future__ import annotations

import contextlib
import cProfile
import enum
import json
import types
from collections.abc import Callable
from typing import Any, Union, get_args, get_origin

import attrs
import cattrs
import pytest
from cattrs.strategies import configure_tagged_union
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.protocol import (
    RECORD_TYPE_HEADER,
    DecodeError,
    DispatchId,
    JournalRecord,
    ModelRecord,
    ParentRef,
    RecordGroup,
    Replay,
    RunEvent,
    RunHeader,
    RunStatus,
    StartDispatch,
    TaskMessage,
    ToolIntentRecord,
    Wait,
    decode_event,
    decode_record,
    decode_records,
    decode_run_header,
    decode_task,
    encode_event,
    encode_group,
    encode_record,
    encode_task,
    from_json,
    group_headers,
    record_headers,
    to_json,
)

EVENT_CLASSES: tuple[type[Any], ...] = get_args(RunEvent)
RECORD_CLASSES: tuple[type[Any], ...] = get_args(JournalRecord)
COMMON_CLASSES: tuple[type[Any], ...] = (DispatchId, Wait, ParentRef, StartDispatch)

Decoder = Callable[[bytes], Any]
DECODERS: dict[str, Decoder] = {
    "event": decode_event,
    "record": decode_record,
    "task": decode_task,
    "run_header": decode_run_header,
}

MAX_LIST_ITEMS = 4
#: Example counts keep this file to a few seconds: it runs per class, and the suite is shared.
EXAMPLES = settings(deadline=None, max_examples=40)
FEW_EXAMPLES = settings(deadline=None, max_examples=10)
MAX_TEXT_CHARS = 20

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=MAX_TEXT_CHARS),
    lambda children: (
        st.lists(children, max_size=MAX_LIST_ITEMS)
        | st.dictionaries(st.text(max_size=8), children, max_size=MAX_LIST_ITEMS)
    ),
    max_leaves=12,
)


def strategy_for(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for a field type of the protocol."""
    if tp is Any:
        return json_values
    if tp is type(None):
        return st.none()
    if tp is str:
        return st.text(max_size=MAX_TEXT_CHARS)
    if tp is bool:
        return st.booleans()
    if tp is int:
        return st.integers()
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return st.sampled_from(list(tp))
    if isinstance(tp, type) and attrs.has(tp):
        return instances(tp)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return st.one_of(*(strategy_for(arg) for arg in get_args(tp)))
    if origin is list:
        return st.lists(strategy_for(get_args(tp)[0]), max_size=MAX_LIST_ITEMS)
    if origin is tuple and len(get_args(tp)) == 2 and get_args(tp)[1] is Ellipsis:
        return st.lists(strategy_for(get_args(tp)[0]), max_size=MAX_LIST_ITEMS).map(tuple)
    raise TypeError(f"no strategy for field type {tp!r}: teach strategy_for about it")


def instances(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Instances of an attrs class with every field drawn, defaulted ones included."""
    attrs.resolve_types(cls)
    return st.builds(cls, **{f.alias: strategy_for(f.type) for f in attrs.fields(cls)})


def required_fields(cls: type[Any]) -> list[str]:
    return [f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING]


def tag(cls: type[Any]) -> str:
    return str(cls.TYPE)


# --- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=tag)
@EXAMPLES
@given(data=st.data())
def test_event_round_trip(cls: type[Any], data: st.DataObject) -> None:
    event = data.draw(instances(cls))
    encoded = encode_event(event)
    assert json.loads(encoded)["type"] == cls.TYPE
    decoded = decode_event(encoded)
    assert type(decoded) is cls
    assert decoded == event


@pytest.mark.parametrize("cls", RECORD_CLASSES, ids=tag)
@EXAMPLES
@given(data=st.data())
def test_record_round_trip(cls: type[Any], data: st.DataObject) -> None:
    record = data.draw(instances(cls))
    encoded = encode_record(record)
    assert json.loads(encoded)["type"] == cls.TYPE
    assert record_headers(record) == {RECORD_TYPE_HEADER: cls.TYPE}
    decoded = decode_record(encoded)
    assert type(decoded) is cls
    assert decoded == record


@EXAMPLES
@given(task=instances(TaskMessage))
def test_task_round_trip(task: TaskMessage) -> None:
    assert decode_task(encode_task(task)) == task


@EXAMPLES
@given(header=instances(RunHeader), extra=st.dictionaries(st.text(max_size=8), json_values))
def test_run_header_reads_a_snapshot_with_more_fields(
    header: RunHeader, extra: dict[str, Any]
) -> None:
    snapshot = {**extra, **json.loads(to_json(header))}
    assert decode_run_header(json.dumps(snapshot).encode()) == header


@pytest.mark.parametrize("cls", COMMON_CLASSES, ids=lambda c: c.__name__)
@EXAMPLES
@given(data=st.data())
def test_common_value_round_trip(cls: type[Any], data: st.DataObject) -> None:
    value = data.draw(instances(cls))
    assert from_json(to_json(value), cls) == value


def test_tags_are_unique() -> None:
    assert len({tag(c) for c in EVENT_CLASSES}) == len(EVENT_CLASSES)
    assert len({tag(c) for c in RECORD_CLASSES}) == len(RECORD_CLASSES)


# --- malformed messages --------------------------------------------------------------------


@pytest.mark.parametrize("decode", DECODERS.values(), ids=list(DECODERS))
@EXAMPLES
@given(raw=st.binary(max_size=64))
def test_random_bytes_are_a_decode_error(decode: Decoder, raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(raw)


@pytest.mark.parametrize("decode", DECODERS.values(), ids=list(DECODERS))
@pytest.mark.parametrize("raw", [b"", b"null", b"[]", b'"x"', b"17", b"{", b"\xff\xfe"])
def test_not_an_object_is_a_decode_error(decode: Decoder, raw: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(raw)


def test_only_an_attrs_class_or_a_union_of_them_needs_a_json_object() -> None:
    """What ``from_json`` refuses up front as "expected a JSON object" (worked out per call: no
    process-wide cache): a class, or a tagged union, never a list of them."""
    with pytest.raises(DecodeError, match="expected a JSON object"):
        from_json(b"[]", DispatchId)
    with pytest.raises(DecodeError, match="expected a JSON object"):
        from_json(b"[]", RunEvent)
    nonce = {"iteration": 0, "attempt": 1, "nonce": "n"}
    assert from_json(json.dumps([nonce]), list[DispatchId]) == [DispatchId(0, 1, "n")]
    assert from_json(b"[1]", Any) == [1]


ALL_TAGS = [tag(c) for c in EVENT_CLASSES + RECORD_CLASSES]
FIELD_NAMES = sorted(
    {f.name for cls in (*EVENT_CLASSES, *RECORD_CLASSES, TaskMessage) for f in attrs.fields(cls)}
)
any_shaped_objects = st.dictionaries(
    st.sampled_from(FIELD_NAMES) | st.text(max_size=8),
    json_values,
    max_size=10,
)


@pytest.mark.parametrize("decode", DECODERS.values(), ids=list(DECODERS))
@EXAMPLES
@given(obj=any_shaped_objects, type_tag=st.sampled_from(ALL_TAGS) | st.text(max_size=12))
def test_any_json_object_decodes_or_is_a_decode_error(
    decode: Decoder, obj: dict[str, Any], type_tag: str
) -> None:
    """The reader's promise: whatever arrives, a message or a DecodeError, never a crash."""
    for candidate in (obj, {**obj, "type": type_tag}):
        with contextlib.suppress(DecodeError):
            decode(json.dumps(candidate).encode())


#: Levels of nesting past the interpreter's recursion limit (json's parser recurses per level):
#: 200 KB of brackets, a message nats-server takes (its default max_payload is 1 MiB).
TOO_DEEP_LEVELS = 100_000


def too_deep_json() -> bytes:
    """A JSON object whose ``type`` is a list nested :data:`TOO_DEEP_LEVELS` deep."""
    return b'{"type":' + b"[" * TOO_DEEP_LEVELS + b"]" * TOO_DEEP_LEVELS + b"}"


@pytest.mark.parametrize("decode", DECODERS.values(), ids=list(DECODERS))
def test_json_nested_past_the_recursion_limit_is_a_decode_error(decode: Decoder) -> None:
    """The reader's promise holds for nesting the parser cannot follow: a DecodeError (was
    RecursionError, which crashed the engine's or the worker's fetch loop)."""
    with pytest.raises(DecodeError, match="nested too deep"):
        decode(too_deep_json())


@pytest.mark.parametrize(("decode", "cls"), [(decode_event, c) for c in EVENT_CLASSES])
def test_unknown_event_type(decode: Decoder, cls: type[Any]) -> None:
    for bad in ("no.such.type", "", tag(RECORD_CLASSES[0]), None, 3):
        with pytest.raises(DecodeError):
            decode(json.dumps({"type": bad, "run_id": "r", "step_id": "s"}).encode())


@pytest.mark.parametrize("bad", ["no.such.type", "", tag(EVENT_CLASSES[0]), None, 3])
def test_unknown_record_type(bad: Any) -> None:
    with pytest.raises(DecodeError):
        decode_record(json.dumps({"type": bad, "iteration": 1, "attempt": 1}).encode())


def _encode_any(value: Any) -> dict[str, Any]:
    cls = type(value)
    if cls in EVENT_CLASSES:
        raw: dict[str, Any] = json.loads(encode_event(value))
    elif cls in RECORD_CLASSES:
        raw = json.loads(encode_record(value))
    else:
        raw = json.loads(to_json(value))
    return raw


DECODER_OF: dict[type[Any], Decoder] = {
    **dict.fromkeys(EVENT_CLASSES, decode_event),
    **dict.fromkeys(RECORD_CLASSES, decode_record),
    TaskMessage: decode_task,
    RunHeader: decode_run_header,
}


@pytest.mark.parametrize("cls", list(DECODER_OF), ids=lambda c: getattr(c, "TYPE", c.__name__))
@FEW_EXAMPLES
@given(data=st.data())
def test_missing_required_field(cls: type[Any], data: st.DataObject) -> None:
    raw = _encode_any(data.draw(instances(cls)))
    for name in required_fields(cls):
        broken = {k: v for k, v in raw.items() if k != name}
        with pytest.raises(DecodeError, match=name):
            DECODER_OF[cls](json.dumps(broken).encode())


def _uncoercible(tp: Any) -> list[Any]:
    """JSON values that no reading of ``tp`` accepts (the converter coerces some, like str)."""
    if get_origin(tp) in (Union, types.UnionType):
        non_none = [a for a in get_args(tp) if a is not type(None)]
        return _uncoercible(non_none[0]) if len(non_none) == 1 else []
    if tp is int:
        return ["seven", [1], {"a": 1}]
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return ["no-such-member", 3, [], {}]
    if isinstance(tp, type) and attrs.has(tp):
        # A class whose fields all have defaults reads a string or a list as "no fields set".
        return ["x", 5, [1, 2]] if required_fields(tp) else [5]
    if get_origin(tp) is list:
        return [5, True]
    return []


@pytest.mark.parametrize("cls", list(DECODER_OF), ids=lambda c: getattr(c, "TYPE", c.__name__))
@FEW_EXAMPLES
@given(data=st.data())
def test_wrong_field_types(cls: type[Any], data: st.DataObject) -> None:
    raw = _encode_any(data.draw(instances(cls)))
    for field in attrs.fields(cls):
        for bad in _uncoercible(field.type):
            with pytest.raises(DecodeError):
                DECODER_OF[cls](json.dumps({**raw, field.name: bad}).encode())


def test_decode_error_names_the_problem() -> None:
    with pytest.raises(DecodeError, match="run event"):
        decode_event(b'{"type": "step.completed", "run_id": "r"}')
    with pytest.raises(DecodeError, match="not valid JSON"):
        decode_record(b"\x00garbage")
    with pytest.raises(DecodeError, match="journal record"):
        decode_record(
            b'{"type": "commit", "iteration": 1, "attempt": 1, "claim_id": "c",'
            b' "nonce": "n", "action": "explode"}'
        )


def test_a_record_group_expands_to_its_records_and_a_bad_one_is_unreadable_whole() -> None:
    """:func:`decode_records` is the one expansion of a stored message: a record alone is one
    record, a group its records in order; a bare array, an empty or nested group, or a group
    with a bad member does not decode (the message is unreadable whole)."""
    from dagnats_trio.protocol import (
        ModelRecord,
        Replay,
        ToolIntentRecord,
        decode_records,
        encode_group,
        group_headers,
    )

    model = ModelRecord(1, 1, "c", 0, {"a": 1})
    intent = ToolIntentRecord(1, 1, "c", 1, "n", {}, Replay.SAFE, "k")
    body = encode_group([model, intent])
    assert json.loads(body)["type"] == "group"
    assert decode_records(body) == (model, intent)
    assert decode_records(encode_record(model)) == (model,)
    assert group_headers([model, intent]) == {RECORD_TYPE_HEADER: "model+tool.intent"}
    with pytest.raises(DecodeError):
        decode_record(body)  # a group is not one record
    records = [json.loads(encode_record(model)), json.loads(encode_record(intent))]
    for bad in (
        json.dumps(records),
        json.dumps({"type": "group", "records": []}),
        json.dumps({"type": "group"}),
        json.dumps({"type": "group", "records": [{"type": "group", "records": records}]}),
        json.dumps({"type": "group", "records": [records[0], {"type": "model"}]}),
    ):
        with pytest.raises(DecodeError):
            decode_records(bad.encode())


# --- the codec's own union and enum hooks (issue 12 goal 3) ----------------------------------


#: What one stored journal message holds (``protocol.records.StoredRecords``).
STORED = JournalRecord | RecordGroup


def _reference_converter() -> cattrs.Converter:
    """A converter as cattrs builds it (its own tagged-union and enum hooks), the reference the
    codec's hooks must agree with on every valid value."""
    ref = cattrs.Converter()
    for union in (RunEvent, JournalRecord, STORED):
        configure_tagged_union(union, ref, tag_generator=tag, tag_name="type")
    return ref


REFERENCE = _reference_converter()
#: (union, class) for every member of the tagged unions on the wire.
UNION_MEMBERS = [
    *((RunEvent, cls) for cls in EVENT_CLASSES),
    *((JournalRecord, cls) for cls in RECORD_CLASSES),
    (STORED, RecordGroup),
]


@pytest.mark.parametrize(("union", "cls"), UNION_MEMBERS, ids=lambda x: getattr(x, "TYPE", ""))
@FEW_EXAMPLES
@given(data=st.data())
def test_the_wire_bytes_are_cattrs_own(union: Any, cls: type[Any], data: st.DataObject) -> None:
    value = data.draw(instances(cls))
    encoded = to_json(value, union)
    expected = json.dumps(
        REFERENCE.unstructure(value, unstructure_as=union),
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()
    assert encoded == expected
    assert from_json(encoded, union) == REFERENCE.structure(json.loads(encoded), union) == value


def _intent() -> ToolIntentRecord:
    return ToolIntentRecord(2, 1, "claim-1", 1, "search", {"q": "x"}, Replay.SAFE, "r.s.2.1")


@pytest.mark.parametrize("bad", ["nope", None, 5, ["tool.intent"]])
def test_an_unknown_tag_or_enum_value_is_still_refused(bad: Any) -> None:
    with pytest.raises(DecodeError, match="not a valid journal record"):
        decode_record(json.dumps({"type": bad, "iteration": 1, "attempt": 1}).encode())
    intent = json.loads(encode_record(_intent()))
    with pytest.raises(DecodeError, match="replay"):
        decode_record(json.dumps({**intent, "replay": bad}).encode())


#: Calls of cattrs' union-member wrappers and enum lambdas (``cattrs/strategies/_unions.py``,
#: ``cattrs/enums.py``) per record group encoded and decoded (a model record and a tool intent,
#: whose ``replay`` is an enum): 8 while the codec used cattrs' own hooks; none since the
#: member's hook is called directly and an enum is read and found by its value in C and a dict.
MAX_UNION_AND_ENUM_WRAPPER_CALLS_PER_GROUP = 0


def test_a_record_group_costs_no_union_member_wrapper_nor_enum_lambda() -> None:
    records: list[JournalRecord] = [ModelRecord(2, 1, "claim-1", 0, {"tool": "search"}), _intent()]
    data = encode_group(records)
    assert decode_records(data) == tuple(records)  # warm
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        decoded = decode_records(encode_group(records))
    finally:
        profiler.disable()
    assert decoded == tuple(records)
    profiler.create_stats()
    stats: dict[tuple[str, int, str], Any] = profiler.stats  # type: ignore[attr-defined]
    calls = {
        f"{key[0].rsplit('/', 1)[-1]}:{key[2]}": figures[1]
        for key, figures in stats.items()
        if key[0].replace("\\", "/").endswith(("cattrs/strategies/_unions.py", "cattrs/enums.py"))
    }
    print(f"cattrs union-member wrapper and enum lambda calls per group: {calls}")
    assert sum(calls.values()) <= MAX_UNION_AND_ENUM_WRAPPER_CALLS_PER_GROUP


#: Python calls made by ``RunStatus.finished`` (asked on every snapshot the engine saves) and
#: ``group_headers`` (every paired journal write) per status read and per group: 1 and 3 (a
#: property; a generator resumed per record) before; none and none since ``finished`` is an
#: attribute of each member and the types are read by ``operator.attrgetter``.
MAX_PYTHON_CALLS_PER_STATUS_AND_GROUP = 0


def test_a_run_status_and_a_groups_headers_are_read_without_python_calls() -> None:
    assert [s.finished for s in RunStatus] == [False, True, True, True]
    records: list[JournalRecord] = [ModelRecord(2, 1, "claim-1", 0, None), _intent()]
    assert group_headers(records) == {RECORD_TYPE_HEADER: "model+tool.intent"}
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        finished = [s.finished for s in RunStatus]
        headers = group_headers(records)
    finally:
        profiler.disable()
    assert finished == [False, True, True, True]
    assert headers == {RECORD_TYPE_HEADER: "model+tool.intent"}
    profiler.create_stats()
    stats: dict[tuple[str, int, str], Any] = profiler.stats  # type: ignore[attr-defined]
    calls = {
        f"{key[0].rsplit('/', 1)[-1]}:{key[2]}": figures[1]
        for key, figures in stats.items()
        if key[0].replace("\\", "/").endswith(("protocol/runs.py", "protocol/records.py"))
        and key[2] != "group_headers"
    }
    print(f"Python calls per status read and group headers: {calls}")
    assert sum(calls.values()) <= MAX_PYTHON_CALLS_PER_STATUS_AND_GROUP
