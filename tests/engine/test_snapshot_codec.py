"""The snapshot's encoding (issue 12 item 3): outbox entries carried from one save to the next
are turned into JSON values once, and what is stored is the same bytes as before."""

from __future__ import annotations

import json

import attrs

from dagnats_trio.engine.effects import PublishTask
from dagnats_trio.engine.snapshot import (
    OUTBOX_JSON_MEMO_MAX_ENTRIES,
    OutboxEntry,
    RunSnapshot,
    decode_snapshot,
    encode_snapshot,
)
from dagnats_trio.protocol import DispatchId, RunStatus, TaskMessage, converter


def _entry(seq: int) -> OutboxEntry:
    task = TaskMessage("r1", "agent", "t", "wf", DispatchId(seq, 1, f"n{seq}"), {"q": [seq]})
    return OutboxEntry(seq, (PublishTask(task, f"r1.agent.n{seq}"),))


def test_a_carried_outbox_entry_is_unstructured_once() -> None:
    entry = _entry(1)
    first = converter.unstructure(entry)
    assert converter.unstructure(entry) is first
    # An equal entry that is another object gets values of its own (no sharing by equality).
    twin = _entry(1)
    assert twin == entry
    assert converter.unstructure(twin) is not first
    assert converter.unstructure(twin) == first


def test_snapshots_sharing_entries_encode_as_before() -> None:
    entries = tuple(_entry(i) for i in range(1, 9))
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", outbox=entries[:7], last_seq=7)
    older = encode_snapshot(snap)
    newer_snap = attrs.evolve(snap, outbox=entries[1:], last_seq=8)
    newer = encode_snapshot(newer_snap)
    assert decode_snapshot(older) == snap
    assert decode_snapshot(newer) == newer_snap
    body = json.loads(newer)
    assert [e["seq"] for e in body["outbox"]] == list(range(2, 9))
    assert body["outbox"][0]["effects"][0] == {
        "type": "publish_task",
        "msg_id": "r1.agent.n2",
        "task": converter.unstructure(entries[1].effects[0].task),
    }


def test_the_memo_is_bounded() -> None:
    kept = [_entry(i) for i in range(OUTBOX_JSON_MEMO_MAX_ENTRIES + 1)]
    first = converter.unstructure(kept[0])
    for entry in kept[1:]:
        converter.unstructure(entry)
    # Past the bound the memo starts again: the first entry is encoded afresh, still the same.
    again = converter.unstructure(kept[0])
    assert again is not first
    assert again == first
