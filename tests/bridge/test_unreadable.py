"""An unreadable record on a bridge lease's journal (issue 16, item 2): the holder's next write
answers 409 ``fenced`` saying what is really there (no successor), the next lease's first journal
call answers 410 ``journal_unreadable``, and the run fails with the reason naming the sequence."""

from __future__ import annotations

from typing import Final

from dagnats_trio.journal import UNREADABLE_REASON, read_journal_for_audit
from dagnats_trio.protocol import ClaimRecord, CommitAction, CommitRecord
from dagnats_trio.protocol.layout import journal_subject

from ._stack import Stack, error_code

#: A writer that died halfway through its body.
TRUNCATED: Final = b'{"type":"model","iteration":0,"attempt":1,"claim_id":"x","ca'


async def test_unreadable_record_fences_the_lease_and_fails_the_run(stack: Stack) -> None:
    workflow, task_type = await stack.workflow(max_attempts=1)
    run_id = await stack.start(workflow)
    first = await stack.poll(task_type)
    await stack.ok(first, "journal/read")
    bad_seq = await stack.transport.publish(journal_subject(run_id, "agent"), TRUNCATED)

    model = {"type": "model", "call": 0, "response": "after the corruption"}
    late = await stack.act(first, "journal/append", model)
    fenced_msg = late.json()["error"]["message"]
    await stack.redeliver(first)
    second = await stack.poll(task_type)
    r = await stack.act(second, "journal/read")
    again = await stack.act(second, "complete", {"output": "nope"})
    view = await stack.finished(run_id)
    records, unreadable, _ = await read_journal_for_audit(stack.transport, run_id, "agent")
    print(
        f"bad record at {bad_seq}; first lease: {late.status_code} {fenced_msg!r}; second "
        f"lease: {r.status_code} {error_code(r)} then {again.status_code} {error_code(again)}; "
        f"run {view['status']} ({view['steps'][0]['reason']}: {view['steps'][0]['error']!r})"
    )
    assert late.status_code == 409 and error_code(late) == "fenced"
    assert f"the record at sequence {bad_seq} is not a claim but unreadable" in fenced_msg
    assert "a successor claimed it" not in fenced_msg
    assert r.status_code == 410 and error_code(r) == "journal_unreadable"
    assert f"sequence {bad_seq}" in r.json()["error"]["message"]
    assert again.status_code == 410 and error_code(again) == "journal_unreadable"
    assert view["status"] == "failed"
    step = view["steps"][0]
    assert step["reason"] == UNREADABLE_REASON
    assert step["error"].startswith(f"journal record at sequence {bad_seq} is unreadable: ")
    assert [u.seq for u in unreadable] == [bad_seq]  # the bad record, left where it is
    after = [rec for seq, rec in records if seq > bad_seq]
    assert [type(rec) for rec in after] == [ClaimRecord, CommitRecord]
    commit = after[-1]
    assert isinstance(commit, CommitRecord) and commit.action is CommitAction.FAIL
    assert commit.reason == UNREADABLE_REASON and commit.retriable
