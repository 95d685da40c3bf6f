"""The per-type encoders (records, record groups, events, tasks) write the bytes ``to_json``
writes, with the converter's hook looked up once instead of dispatched per message, and a
record group's list built without cattrs' list and group hooks (issue 12 goal 3)."""

from __future__ import annotations

import cProfile
import json
from typing import Any, Final

import pytest

from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    DispatchId,
    InputPlacedRecord,
    JournalRecord,
    ModelRecord,
    Replay,
    RunEvent,
    StepCompleted,
    StepContinue,
    StepFailed,
    TaskMessage,
    ToolIntentRecord,
    ToolOutputRecord,
    ToolResultRecord,
    Wait,
    decode_event,
    decode_records,
    decode_task,
    encode_event,
    encode_group,
    encode_record,
    encode_task,
    to_json,
)
from dagnats_trio.protocol.records import RecordGroup, StoredRecords

_STATE: Final = [
    {"role": "user", "content": {"task": "déployer"}},
    {"role": "tool", "output": {"ok": True, "n": [1, 2.5, None]}, "error": None},
]

RECORDS: Final[list[JournalRecord]] = [
    ClaimRecord(1, 2, "c1", "n1"),
    ModelRecord(1, 2, "c1", 0, {"done": False, "tool": "search"}),
    ToolIntentRecord(1, 2, "c1", 1, "search", {"q": "x"}, Replay.UNSAFE, "r.s.1.1"),
    ToolIntentRecord(
        1, 2, "c1", 2, "a", None, Replay.SAFE, "k", group=2, group_size=2, call_id="m"
    ),
    ToolOutputRecord(1, 2, "c1", 1, "chunk"),
    ToolResultRecord(1, 2, "c1", 1, output={"ok": True}, partial=["p"], cancelled_by=3),
    ToolResultRecord(1, 2, "c1", 1, error="boom", interrupted=True),
    InputPlacedRecord(1, 2, "c1", "req", "replace", {"a": 1}),
    CommitRecord(1, 2, "c1", "n1", CommitAction.CONTINUE, state=_STATE, wait=Wait(delay_ms=5)),
    CommitRecord(1, 2, "c1", "n1", CommitAction.COMPLETE, output="done"),
]

EVENTS: Final[list[RunEvent]] = [
    StepContinue("r", "s", DispatchId(1, 2, "n"), output=_STATE, journal_seq=7),
    StepCompleted("r", "s", DispatchId(1, 2, "n"), output={"answer": 42}),
    StepFailed("r", "s", DispatchId(1, 2, "n"), error="e", retriable=False, reason="x"),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.TYPE)
def test_a_record_is_encoded_as_to_json_encodes_it(record: JournalRecord) -> None:
    data = encode_record(record)
    assert data == to_json(record, JournalRecord)
    assert decode_records(data) == (record,)


@pytest.mark.parametrize("n", [1, 2, len(RECORDS)])
def test_a_group_is_encoded_as_to_json_encodes_it(n: int) -> None:
    records = RECORDS[:n]
    data = encode_group(records)
    assert data == to_json(RecordGroup(records), StoredRecords)
    assert json.loads(data)["type"] == "group"
    assert decode_records(data) == tuple(records)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.TYPE)
def test_an_event_is_encoded_as_to_json_encodes_it(event: RunEvent) -> None:
    data = encode_event(event)
    assert data == to_json(event, RunEvent)
    assert decode_event(data) == event


def test_a_task_is_encoded_as_to_json_encodes_it() -> None:
    task = TaskMessage("r", "s", "t", "w", DispatchId(1, 2, "n"), input=_STATE, journal_seq=3)
    data = encode_task(task)
    assert data == to_json(task)
    assert decode_task(data) == task


def test_what_is_not_json_in_a_record_is_still_unstructured_or_refused() -> None:
    class Colour:
        pass

    rec = ModelRecord(0, 1, "c", 0, {"t": (1, 2)})
    assert json.loads(encode_group([rec]))["records"][0]["response"] == {"t": [1, 2]}
    with pytest.raises(TypeError):
        encode_group([ModelRecord(0, 1, "c", 0, {"x": Colour()})])


#: Python calls and built-in calls per record group of two records encoded (a tool result and
#: a commit with a wait), json's own included: 22 through ``to_json`` (cattrs' ``unstructure``,
#: the group's construction, the tagged union's hook for the group, the group's generated hook,
#: the list hook and its generator resumed per record); 14 with the group's form built in
#: ``encode_group``.
MAX_CALLS_PER_GROUP_ENCODED: Final = 14


def test_encoding_a_group_costs_few_calls() -> None:
    records = [RECORDS[5], RECORDS[8]]
    expected = encode_group(records)  # warm: the hooks are generated
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        data = encode_group(records)
    finally:
        profiler.disable()
    assert data == expected
    profiler.create_stats()
    stats: dict[tuple[str, int, str], Any] = profiler.stats  # type: ignore[attr-defined]
    calls = sum(figures[1] for key, figures in stats.items() if "disable" not in key[2])
    print(f"calls per group of two records encoded: {calls}")
    assert calls <= MAX_CALLS_PER_GROUP_ENCODED
