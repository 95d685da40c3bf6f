"""The snapshot's encoding (issue 12 item 3): outbox entries carried from one save to the next
are turned into JSON values and text once, the run's definition into text once, and what is
stored is the same bytes as the one converter's encoding."""

from __future__ import annotations

import json
from typing import Any, final

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.dag import WorkflowDef
from dagnats_trio.engine.effects import (
    AnnounceCancel,
    CheckQueuedInputs,
    PublishTask,
    SettleInputs,
)
from dagnats_trio.engine.snapshot import (
    OUTBOX_JSON_MEMO_MAX_CHARS,
    OUTBOX_JSON_MEMO_MAX_ENTRIES,
    OutboxEntry,
    Park,
    RunSnapshot,
    SnapshotEncoder,
    StepState,
    StepStatus,
    decode_snapshot,
    encode_snapshot,
)
from dagnats_trio.protocol import (
    DispatchId,
    RunStatus,
    TaskMessage,
    converter,
    encode_task,
    to_json,
)
from dagnats_trio.testing import agent_workflow


def _entry(seq: int) -> OutboxEntry:
    task = TaskMessage("r1", "agent", "t", "wf", DispatchId(seq, 1, f"n{seq}"), {"q": [seq]})
    return OutboxEntry(seq, (PublishTask(task, f"r1.agent.n{seq}"),))


def test_a_carried_outbox_entry_is_spelled_once_per_encoder() -> None:
    encoder = SnapshotEncoder()
    entry = _entry(1)
    first = encoder._outbox_text(entry)
    assert encoder._outbox_text(entry) is first
    # An equal entry that is another object gets a text of its own (no sharing by equality).
    twin = _entry(1)
    assert twin == entry
    assert encoder._outbox_text(twin) is not first
    assert encoder._outbox_text(twin) == first
    # Nothing is remembered beyond the encoder: another one, or the converter, spells anew.
    assert SnapshotEncoder()._outbox_text(entry) is not first
    assert converter.unstructure(entry) is not converter.unstructure(entry)


def test_each_memo_is_bounded() -> None:
    """A memo full at ``OUTBOX_JSON_MEMO_MAX_ENTRIES`` is emptied, never grown past it."""
    encoder = SnapshotEncoder()
    entries = [_entry(i) for i in range(OUTBOX_JSON_MEMO_MAX_ENTRIES + 1)]
    texts = [encoder._outbox_text(entry) for entry in entries]
    assert len(encoder._outbox.slots) == 1
    assert encoder._outbox_text(entries[-1]) is texts[-1]
    assert encoder._outbox_text(entries[0]) is not texts[0]  # spelled again, the same bytes
    assert encoder._outbox_text(entries[0]) == texts[0]


def test_each_memo_is_bounded_in_characters_too() -> None:
    """Large inputs fill a memo by size long before its entry count: it never holds more than
    ``OUTBOX_JSON_MEMO_MAX_CHARS`` of text, and a text larger than that is not kept at all."""
    encoder = SnapshotEncoder()
    quarter = "x" * (OUTBOX_JSON_MEMO_MAX_CHARS // 4)

    def big(seq: int, payload: str) -> OutboxEntry:
        task = TaskMessage("r1", "agent", "t", "wf", DispatchId(seq, 1, f"n{seq}"), payload)
        return OutboxEntry(seq, (PublishTask(task, f"r1.agent.n{seq}"),))

    entries = [big(i, quarter) for i in range(6)]
    for entry in entries:
        encoder._outbox_text(entry)
        held = sum(len(text) for _, text in encoder._outbox.slots.values())
        assert 0 < held <= OUTBOX_JSON_MEMO_MAX_CHARS
        assert len(encoder._outbox.slots) <= 3
    huge = big(9, "y" * OUTBOX_JSON_MEMO_MAX_CHARS)
    text = encoder._outbox_text(huge)
    assert json.loads(text)["seq"] == 9
    assert encoder._outbox.slots == {}
    assert encoder._outbox_text(huge) is not text and encoder._outbox_text(huge) == text


def test_snapshots_sharing_entries_encode_as_before() -> None:
    entries = tuple(_entry(i) for i in range(1, 9))
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", outbox=entries[:7], last_seq=7)
    encoder = SnapshotEncoder()
    older = encoder.encode(snap)
    newer_snap = attrs.evolve(snap, outbox=entries[1:], last_seq=8)
    newer = encoder.encode(newer_snap)
    assert older == to_json(snap) and newer == to_json(newer_snap)
    assert decode_snapshot(older) == snap
    assert decode_snapshot(newer) == newer_snap
    body = json.loads(newer)
    assert [e["seq"] for e in body["outbox"]] == list(range(2, 9))
    assert body["outbox"][0]["effects"][0] == {
        "type": "publish_task",
        "msg_id": "r1.agent.n2",
        "task": converter.unstructure(entries[1].effects[0].task),
    }


# --- the spliced encoding (issue 12 goal 3) ---------------------------------------------------

#: Hypothesis examples per property: the file runs in a second or two.
SNAPSHOT_EXAMPLES = settings(deadline=None, max_examples=60)

_DEFINITIONS = (
    None,
    WorkflowDef.from_json(agent_workflow("wf-agent")),
    WorkflowDef.from_json(
        {
            "name": "wf-two",
            "steps": [
                {"id": "a", "task": "t", "timeout": "5s"},
                {"id": "b", "task": "u", "depends_on": ["a"], "retry": {"max_attempts": 3}},
            ],
        }
    ),
)
_texts = st.text(max_size=12)
_json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False,
    allow_infinity=False) | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
_optional_ints = st.none() | st.integers(0, 2**53)
_dispatches = st.builds(DispatchId, st.integers(0, 1000), st.integers(1, 9), _texts)
_step_states = st.builds(
    StepState,
    step_id=_texts,
    status=st.sampled_from(list(StepStatus)),
    dispatch=st.none() | _dispatches,
    park=st.none() | st.sampled_from(list(Park)),
    output=_json_values,
    error=st.none() | _texts,
    journal_seq=_optional_ints,
    iterations=st.integers(0, 100),
    started_at_ms=_optional_ints,
)
_tasks = st.builds(
    TaskMessage,
    _texts,
    _texts,
    _texts,
    _texts,
    _dispatches,
    _json_values,
    journal_seq=_optional_ints,
)
_entries = st.builds(
    OutboxEntry,
    st.integers(0, 2**53),
    st.lists(
        st.builds(PublishTask, _tasks, _texts)
        | st.builds(AnnounceCancel, _texts)
        | st.builds(CheckQueuedInputs, _texts, _texts, _texts)
        | st.builds(SettleInputs, _texts, _texts),
        max_size=3,
    ).map(tuple),
)
_snapshots = st.builds(
    RunSnapshot,
    _texts,
    st.sampled_from(list(RunStatus)),
    _texts,
    definition=st.sampled_from(_DEFINITIONS),
    input=_json_values,
    output=_json_values,
    error=st.none() | _texts,
    started=st.booleans(),
    updated_at_ms=st.integers(0, 2**53),
    steps=st.dictionaries(_texts, _step_states, max_size=3),
    last_seq=st.integers(0, 2**53),
    outbox=st.lists(_entries, max_size=3).map(tuple),
)


@SNAPSHOT_EXAMPLES
@given(snap=_snapshots)
def test_the_spliced_snapshot_is_the_bytes_of_the_one_converter(snap: RunSnapshot) -> None:
    data = encode_snapshot(snap)
    assert data == to_json(snap)
    encoder = SnapshotEncoder()
    assert encoder.encode(snap) == data
    assert encoder.encode(snap) == data  # the memoised texts spell the same
    assert decode_snapshot(data) == snap
    # The field order of the class is the order of the bytes; a field is left out only when
    # it is at its default, and a step's status is always written (the inputs service reads it).
    body = json.loads(data)
    names = [f.name for f in attrs.fields(RunSnapshot)]
    assert list(body) == [name for name in names if name in body]
    assert {"run_id", "status", "workflow"} <= body.keys()
    for f in attrs.fields(RunSnapshot):
        if f.name not in body:
            assert getattr(snap, f.name) == _default(f), f.name
    assert all("status" in step for step in body.get("steps", {}).values())


def _default(field: Any) -> Any:
    default = field.default
    return default.factory() if isinstance(default, attrs.Factory) else default  # type: ignore[arg-type]


@SNAPSHOT_EXAMPLES
@given(snap=_snapshots, later=_snapshots)
def test_a_shared_definition_and_carried_entries_encode_as_their_own_fields(
    snap: RunSnapshot, later: RunSnapshot
) -> None:
    """The next save of a run: the same definition and some of the same entries, everything
    else changed."""
    moved = attrs.evolve(later, definition=snap.definition, outbox=snap.outbox[1:] + later.outbox)
    encoder = SnapshotEncoder()
    encoder.encode(snap)
    data = encoder.encode(moved)
    assert data == to_json(moved)
    assert decode_snapshot(data) == moved


@final
@attrs.frozen
class _Counted:
    """Not plain JSON: unstructured by the hook the test registers, which counts."""

    n: int


def test_a_carried_outbox_entry_and_the_definition_are_spelled_once() -> None:
    """The engine saves a run's snapshot on every event; the outbox entries it carries and the
    run's definition (most of the bytes) are turned into JSON text once, not on every save.
    Counted by the converter's hooks: a non-JSON value in a task's input is unstructured by
    its type's hook each time the entry is spelled, and so is the definition."""
    spelled: list[str] = []
    converter.register_unstructure_hook(_Counted, lambda c: spelled.append("entry") or {"n": c.n})
    definition = WorkflowDef.from_json(agent_workflow("wf-counted"))
    unstructure_definition = converter.get_unstructure_hook(WorkflowDef)

    def counted_definition(d: WorkflowDef) -> Any:
        spelled.append("definition")
        return unstructure_definition(d)

    converter.register_unstructure_hook(WorkflowDef, counted_definition)
    try:
        task = TaskMessage("r1", "a", "t", "wf", DispatchId(0, 1, "n0"), {"c": _Counted(7)})
        entry = OutboxEntry(1, (PublishTask(task, "r1.a.n0"),))
        snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", definition=definition, outbox=(entry,))
        encoder = SnapshotEncoder()
        first = encoder.encode(snap)
        assert json.loads(first)["outbox"][0]["effects"][0]["task"]["input"] == {"c": {"n": 7}}
        assert sorted(spelled) == ["definition", "entry"]
        for last_seq in range(2, 6):
            encoder.encode(attrs.evolve(snap, last_seq=last_seq))
        encoder.definition_ref(definition)
        assert sorted(spelled) == ["definition", "entry"]
        # Another definition object (another run), equal or not, is spelled for itself.
        twin = WorkflowDef.from_json(agent_workflow("wf-counted"))
        encoder.encode(attrs.evolve(snap, definition=twin))
        assert sorted(spelled) == ["definition", "definition", "entry"]
        # The memos are the encoder's, none the process's: the one-off function and another
        # encoder spell everything again.
        spelled.clear()
        assert encode_snapshot(snap) == first
        assert SnapshotEncoder().encode(snap) == first
        assert sorted(spelled) == ["definition", "definition", "entry", "entry"]
    finally:
        converter.register_unstructure_hook(WorkflowDef, unstructure_definition)


def test_a_dispatchs_task_is_spelled_once_for_its_outbox_entry_and_its_publish() -> None:
    """The engine saves a dispatch (its task in the outbox entry) and then publishes the task:
    the publish's bytes are ``encode_task``'s, spelled once with the entry (counted by the
    converter's hook of a non-JSON value in the task's input). Another effect object, equal or
    not, and another encoder, spell again."""
    spelled: list[str] = []
    converter.register_unstructure_hook(_Counted, lambda c: spelled.append("task") or {"n": c.n})
    task = TaskMessage("r1", "a", "t", "wf", DispatchId(0, 1, "n0"), {"c": _Counted(7)})
    effect = PublishTask(task, "r1.a.n0")
    entry = OutboxEntry(1, (AnnounceCancel("r1"), effect, SettleInputs("r1", "a")))
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", outbox=(entry,))
    encoder = SnapshotEncoder()
    data = encoder.encode(snap)
    assert data == to_json(snap)
    assert spelled == ["task", "task"]  # the encoder's spelling, then to_json's
    spelled.clear()
    assert encoder.task_bytes(effect) == encode_task(task)
    assert spelled == ["task"]  # encode_task's alone: the encoder's came from its memo
    spelled.clear()
    twin = PublishTask(task, "r1.a.n0")
    assert encoder.task_bytes(twin) == encode_task(task)
    assert SnapshotEncoder().task_bytes(effect) == encode_task(task)
    assert spelled == ["task", "task", "task", "task"]
    # The publish's memo is bounded like the others and emptied when full.
    assert len(encoder._tasks.slots) == 2


#: The scripted agent's first save as the release before this one wrote it (every field, those
#: at their default included): what a store made by an earlier version holds.
EARLIER_RELEASE_SNAPSHOT = (
    b'{"run_id":"4f6d5548d8db4de6","status":"running","workflow":"bench-agent","definition":'
    b'{"name":"bench-agent","steps":[{"id":"agent","task":"scripted-agent","depends_on":[],"'
    b'type":"agent_loop","timeout":null,"retry":{"max_attempts":5,"strategy":"fixed","initia'
    b'l_delay":100,"max_delay":60000,"multiplier":2.0},"agent_loop":{"max_iterations":20,"ma'
    b'x_duration":null,"loop_delay":0,"loop_state_max_bytes":1048576},"sub_workflow":null}],'
    b'"version":1},"input":null,"output":null,"error":null,"failed_step":null,"parent":null,'
    b'"idempotency_key":null,"started":true,"created_at_ms":1796139035125,"updated_at_ms":17'
    b'96139035128,"finished_at_ms":null,"timers_armed":false,"steps":{"agent":{"step_id":"ag'
    b'ent","status":"running","dispatch":{"iteration":0,"attempt":1,"nonce":"6162065f2471044'
    b'6"},"park":null,"wait":null,"wake_at_ms":null,"output":null,"error":null,"reason":null'
    b',"journal_seq":null,"iterations":0,"child_run_id":null,"started_at_ms":1796139035128,"'
    b'dispatched_at_ms":1796139035128,"finished_at_ms":null}},"last_seq":1,"outbox":[{"seq":'
    b'1,"effects":[{"task":{"run_id":"4f6d5548d8db4de6","step_id":"agent","task":"scripted-a'
    b'gent","workflow":"bench-agent","dispatch":{"iteration":0,"attempt":1,"nonce":"6162065f'
    b'24710446"},"input":null,"journal_seq":null,"loop_state_max_bytes":1048576,"is_loop":tr'
    b'ue},"msg_id":"4f6d5548d8db4de6.agent.6162065f24710446","type":"publish_task"}]}]}'
)


def test_a_snapshot_of_an_earlier_release_decodes_and_saves_without_its_defaults() -> None:
    """Issue 12 goal 1: a field at its default is left out of a saved snapshot (every byte of
    a save is paid in its fsync); a snapshot stored whole by an earlier release still decodes,
    and an earlier release decodes the new bytes too (every field it has is at a default it
    knows: nothing but ``run_id``, ``status``, ``workflow``, a step's id and an entry's
    sequence is required)."""
    snap = decode_snapshot(EARLIER_RELEASE_SNAPSHOT)
    assert snap.status is RunStatus.RUNNING and snap.started and snap.last_seq == 1
    assert snap.steps["agent"].dispatch == DispatchId(0, 1, "6162065f24710446")
    assert snap.steps["agent"].error is None and snap.steps["agent"].iterations == 0
    (effect,) = snap.outbox[0].effects
    assert isinstance(effect, PublishTask) and effect.task.is_loop
    data = encode_snapshot(snap)
    assert decode_snapshot(data) == snap
    print(f"snapshot bytes: earlier release {len(EARLIER_RELEASE_SNAPSHOT)}, now {len(data)}")
    assert len(data) <= len(EARLIER_RELEASE_SNAPSHOT) - 290
    body = json.loads(data)
    # Nothing of the run's or its step's own fields is written at its default; the definition
    # and the outbox's task are wire shapes of their own, written whole.
    assert list(body) == [
        "run_id", "status", "workflow", "definition", "started", "created_at_ms",
        "updated_at_ms", "steps", "last_seq", "outbox",
    ]  # fmt: skip
    assert list(body["steps"]["agent"]) == [
        "step_id", "status", "dispatch", "started_at_ms", "dispatched_at_ms",
    ]  # fmt: skip
    assert body["definition"] == json.loads(EARLIER_RELEASE_SNAPSHOT)["definition"]
    assert body["outbox"] == json.loads(EARLIER_RELEASE_SNAPSHOT)["outbox"]


def test_a_stored_outbox_entry_is_its_sequence_alone() -> None:
    entries = (_entry(1), OutboxEntry(2))
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", outbox=entries, last_seq=2)
    body = json.loads(encode_snapshot(snap))
    assert body["outbox"][1] == {"seq": 2}
    assert decode_snapshot(encode_snapshot(snap)) == snap
