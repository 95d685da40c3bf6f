"""An effect's message is spelled once (issue 12 goal 3): the task or event a decision
publishes is the same text in the snapshot's outbox entry and in the publish, so the engine
makes it once; both stay the bytes of the one converter (``to_json``, ``encode_task``,
``encode_event``), and an entry decoded from the store (a replay after a crash) publishes the
same bytes as the engine that saved it did."""

from __future__ import annotations

import json
from typing import Any, final

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from dagnats_trio.engine._effect_text import (
    MESSAGE_TEXT_MEMO_MAX_ENTRIES,
    effect_text,
    message_bytes,
    message_text,
)
from dagnats_trio.engine.effects import (
    AnnounceCancel,
    ArmTimer,
    CheckQueuedInputs,
    Effect,
    PublishEvent,
    PublishTask,
    SettleInputs,
)
from dagnats_trio.engine.snapshot import OutboxEntry, RunSnapshot, decode_snapshot, encode_snapshot
from dagnats_trio.protocol import (
    CancelRequested,
    ChildFinished,
    DispatchId,
    InputSubmitted,
    RunStatus,
    StepCompleted,
    TaskMessage,
    TimerFired,
    WorkflowStarted,
    converter,
    dumps_json,
    encode_event,
    encode_task,
    to_json,
)

#: Hypothesis examples per property: the file runs in a second or two.
EFFECT_EXAMPLES = settings(deadline=None, max_examples=80)

_texts = st.text(max_size=10)
_json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False,
    allow_infinity=False) | _texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_texts, inner, max_size=3),
    max_leaves=6,
)  # fmt: skip
_dispatches = st.none() | st.builds(DispatchId, st.integers(0, 99), st.integers(1, 9), _texts)
_tasks = st.builds(
    TaskMessage, _texts, _texts, _texts, _texts, st.builds(DispatchId, st.integers(0, 9),
    st.integers(1, 9), _texts), _json_values, journal_seq=st.none() | st.integers(0, 2**53),
)  # fmt: skip
_events = st.one_of(
    st.builds(WorkflowStarted, _texts, _texts, _json_values, started_at_ms=st.integers(0, 2**53)),
    st.builds(StepCompleted, _texts, _texts, _dispatches, _json_values),
    st.builds(ChildFinished, _texts, _texts, _texts, _texts, _json_values),
    st.builds(CancelRequested, _texts, _texts),
    st.builds(InputSubmitted, _texts, _texts, _texts),
)
_effects: st.SearchStrategy[Effect] = st.one_of(
    st.builds(PublishTask, _tasks, _texts),
    st.builds(PublishEvent, _texts, _events, _texts),
    st.builds(
        ArmTimer, _texts, st.integers(0, 2**53), st.builds(TimerFired, _texts, _texts, _texts)
    ),
    st.builds(AnnounceCancel, _texts),
    st.builds(CheckQueuedInputs, _texts, _texts, _texts),
    st.builds(SettleInputs, _texts, _texts),
)


@EFFECT_EXAMPLES
@given(effect=_effects)
def test_an_effect_is_the_bytes_of_the_one_converter(effect: Effect) -> None:
    assert effect_text(effect) == dumps_json(converter.unstructure(effect, Effect))
    assert effect_text(effect) == effect_text(effect)  # the memoised message spells the same
    if isinstance(effect, PublishTask):
        assert message_bytes(effect) == encode_task(effect.task)
    elif isinstance(effect, PublishEvent):
        assert message_bytes(effect) == encode_event(effect.event)


@EFFECT_EXAMPLES
@given(effects=st.lists(_effects, max_size=3), seq=st.integers(0, 2**53))
def test_an_outbox_entry_is_the_bytes_of_the_one_converter_and_replays_them(
    effects: list[Effect], seq: int
) -> None:
    entry = OutboxEntry(seq, tuple(effects))
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", outbox=(entry,), last_seq=seq)
    data = encode_snapshot(snap)
    assert data == to_json(snap)
    # The entry read back from the store (new objects: nothing memoised) publishes what the
    # engine that saved it published.
    (replayed,) = decode_snapshot(data).outbox
    assert replayed == entry
    for saved, again in zip(entry.effects, replayed.effects, strict=True):
        assert again is not saved
        if isinstance(saved, PublishTask | PublishEvent):
            assert isinstance(again, PublishTask | PublishEvent)
            assert message_bytes(again) == message_bytes(saved)


@final
@attrs.frozen
class _Counted:
    """Not plain JSON: unstructured by the hook the test registers, which counts."""

    n: int


def test_a_task_is_spelled_once_for_its_outbox_entry_and_its_publish() -> None:
    spelled: list[int] = []
    converter.register_unstructure_hook(_Counted, lambda c: spelled.append(c.n) or {"n": c.n})
    task = TaskMessage("r1", "a", "t", "wf", DispatchId(0, 1, "n0"), {"c": _Counted(7)})
    effect = PublishTask(task, "r1.a.n0")
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", outbox=(OutboxEntry(1, (effect,)),))
    saved = encode_snapshot(snap)
    assert spelled == [7]
    published = message_bytes(effect)
    assert spelled == [7]  # the publish took the outbox entry's text
    assert json.loads(published) == json.loads(saved)["outbox"][0]["effects"][0]["task"]
    assert published == encode_task(task)
    assert spelled == [7, 7]  # encode_task spells it itself: the counter counts
    # An equal effect that is another object is spelled for itself (no sharing by equality).
    twin = PublishTask(task, "r1.a.n0")
    assert message_bytes(twin) == published
    assert spelled == [7, 7, 7]


def test_the_memo_is_bounded() -> None:
    tasks = [TaskMessage("r1", "a", "t", "wf", DispatchId(i, 1, "n"), None) for i in range(3)]
    first = PublishTask(tasks[0], "m0")
    text = message_text(first)
    assert message_text(first) is text  # memoised
    for i in range(MESSAGE_TEXT_MEMO_MAX_ENTRIES + 1):
        message_text(PublishTask(tasks[i % 3], f"m{i}"))
    # Past the bound the memo starts again: the first effect is spelled afresh, still the same.
    again = message_text(first)
    assert again is not text
    assert again == text and again.encode() == encode_task(tasks[0])
