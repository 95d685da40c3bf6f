"""A record a bridge client appends at the wrong position is refused with 400 and stores nothing.

Before, the bridge stored a tool result or partial output with no intent at its call, a second
result, and a model record at a position already used: each made ``journal check`` fail on that
run for good. Now each answers 400 ``invalid_record`` naming the audit's rule, before anything is
written (a misplaced first record does not even claim), and the run goes on to a journal that
passes the check.
"""

from __future__ import annotations

from typing import Any

from dagnats_trio.journal import read_journal

from ._stack import Stack, error_code

INTENT: dict[str, Any] = {
    "type": "tool.intent",
    "call": 1,
    "name": "search",
    "input": {"q": "x"},
    "replay": "safe",
}
RESULT: dict[str, Any] = {"type": "tool.result", "call": 1, "output": {"hits": 1}}
MODEL: dict[str, Any] = {"type": "model", "call": 0, "response": {"say": "hi"}}


async def _refused(stack: Stack, lease: dict[str, Any], body: Any, rule: str) -> None:
    before = await read_journal(stack.transport, lease["run_id"], "agent")
    r = await stack.act(lease, "journal/append", body)
    assert r.status_code == 400, (body, r.status_code, r.text)
    assert error_code(r) == "invalid_record"
    assert r.json()["error"]["message"].startswith(f"{rule}: "), r.text
    assert await read_journal(stack.transport, lease["run_id"], "agent") == before


async def test_misplaced_records_are_refused_and_store_nothing(stack: Stack) -> None:
    workflow, task_type = await stack.workflow(loop=True)
    run_id = await stack.start(workflow, {"goal": "g"})
    lease = await stack.poll(task_type)

    # Misplaced first records claim nothing.
    await _refused(stack, lease, {**RESULT, "call": 5}, "result-without-intent")
    await _refused(
        stack, lease, {"type": "tool.output", "call": 2, "chunk": "x"}, "output-without-intent"
    )
    assert await read_journal(stack.transport, run_id, "agent") == []

    await stack.ok(lease, "journal/append", MODEL)
    before = await read_journal(stack.transport, run_id, "agent")
    r = await stack.act(lease, "journal/append", {**INTENT, "name": ""})
    assert r.status_code == 400 and error_code(r) == "invalid_record", r.text
    assert "name must be a non-empty string" in r.text
    assert await read_journal(stack.transport, run_id, "agent") == before
    await _refused(stack, lease, {**MODEL, "response": "again"}, "position-reused")
    await _refused(stack, lease, {**INTENT, "call": 0}, "position-reused")
    await stack.ok(lease, "journal/append", INTENT)
    await _refused(stack, lease, {**INTENT, "name": "other"}, "duplicate-intent")
    await _refused(stack, lease, {**MODEL, "call": 1}, "position-reused")
    await stack.ok(lease, "journal/append", RESULT)
    await _refused(stack, lease, {**RESULT, "output": {"hits": 2}}, "duplicate-result")
    await stack.ok(lease, "complete", {"output": "done"})

    view = await stack.finished(run_id)
    assert view["status"] == "completed"
    kinds = [rec.TYPE for _, rec in await read_journal(stack.transport, run_id, "agent")]
    assert kinds == ["claim", "model", "tool.intent", "tool.result", "commit"]
    r = await stack.client.get(f"/runs/{run_id}/steps/agent/journal/check")
    assert r.status_code == 200 and r.json()["ok"], r.text
