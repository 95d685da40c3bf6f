"""A bridge client runs plain steps and journal loops end to end over real HTTP."""

from __future__ import annotations

import httpx

from dagnats_trio.protocol import (
    ClaimRecord,
    JournalRecord,
    ModelRecord,
    Replay,
    RunStatus,
    ToolIntentRecord,
    encode_group,
    encode_record,
    group_headers,
    layout,
    record_headers,
)

from ._stack import TOKEN, Stack, error_code


async def test_plain_step_completes_and_settles_once(stack: Stack) -> None:
    workflow, task_type = await stack.workflow()
    empty = await stack.client.post(f"/bridge/tasks/{task_type}/poll", params={"wait": "0"})
    assert empty.status_code == 204

    run_id = await stack.start(workflow, {"x": 1})
    lease = await stack.poll(task_type)
    assert (lease["run_id"], lease["step_id"], lease["iteration"], lease["attempt"]) == (
        run_id,
        "agent",
        0,
        1,
    )
    assert lease["input"] == {"x": 1} and lease["journal_seq"] is None
    assert lease["ack_wait_ms"] == 1000
    assert (await stack.ok(lease, "heartbeat"))["claimed"] is False
    state = await stack.ok(lease, "load_checkpoint")
    assert state == {"source": "input", "state": {"x": 1}, "seq": None}

    settled = await stack.ok(lease, "complete", {"output": {"y": 2}})
    assert settled == {"action": "complete", "journal_seq": None}
    view = await stack.finished(run_id)
    assert view["status"] == "completed"
    assert view["steps"][0]["output"] == {"y": 2}

    again = await stack.act(lease, "complete", {"output": "twice"})
    assert again.status_code == 410 and error_code(again) == "settled"
    beat = await stack.act(lease, "heartbeat")
    assert beat.status_code == 410 and error_code(beat) == "settled"
    unknown = await stack.client.post("/bridge/leases/no-such-token/heartbeat")
    assert unknown.status_code == 404 and error_code(unknown) == "lease_not_found"


async def test_plain_step_checkpoint_goes_to_kv(stack: Stack) -> None:
    workflow, task_type = await stack.workflow()
    run_id = await stack.start(workflow, "in")
    lease = await stack.poll(task_type)
    assert (await stack.ok(lease, "checkpoint", {"state": [1, 2]}))["stored"] == "kv"
    assert await stack.ok(lease, "load_checkpoint") == {
        "source": "kv",
        "state": [1, 2],
        "seq": None,
    }
    # A blank reason is refused, naming the field, and the lease is left as it was.
    for blank in ("", "  \n"):
        r = await stack.act(lease, "fail", {"error": blank, "retriable": False})
        assert r.status_code == 400, r.text
        assert error_code(r) == "invalid_error"
        assert r.json()["error"]["message"].startswith("error ")
    failed = await stack.ok(lease, "fail", {"error": "boom", "retriable": False})
    assert failed["action"] == "fail"
    view = await stack.finished(run_id)
    assert view["status"] == "failed"


async def test_journal_loop_continues_twice_then_completes(stack: Stack) -> None:
    workflow, task_type = await stack.workflow(loop=True)
    run_id = await stack.start(workflow, {"goal": "g"})
    seqs: list[int] = []
    for iteration in range(3):
        lease = await stack.poll(task_type)
        assert lease["iteration"] == iteration
        if iteration == 0:
            assert (await stack.ok(lease, "load_checkpoint"))["source"] == "input"
        else:
            # Before the claim the state is read from the commit the task names.
            before = await stack.ok(lease, "load_checkpoint")
            assert before == {"source": "journal", "state": {"n": iteration}, "seq": seqs[-1]}
            assert lease["journal_seq"] == seqs[-1]
        claim = await stack.ok(lease, "journal/read")
        assert [e["record"]["type"] for e in claim["records"]] == ["claim"]
        assert claim["records"][0]["record"]["claim_id"] == claim["claim_id"]
        assert claim["last_seq"] == claim["records"][0]["seq"]
        assert (await stack.ok(lease, "heartbeat"))["claimed"] is True

        model = {"type": "model", "call": 0, "response": {"say": iteration}}
        seq_model = (await stack.ok(lease, "journal/append", model))["seq"]
        intent = {
            "type": "tool.intent",
            "call": 1,
            "name": "search",
            "input": {"q": iteration},
            "replay": "safe",
        }
        await stack.ok(lease, "journal/append", intent)
        result = {"type": "tool.result", "call": 1, "output": {"hits": 1}}
        seq_result = (await stack.ok(lease, "journal/append", result))["seq"]
        assert seq_result > seq_model

        read = await stack.ok(lease, "journal/read")
        kinds = [e["record"]["type"] for e in read["records"]]
        assert kinds == ["claim", "model", "tool.intent", "tool.result"]
        assert read["records"][2]["record"]["key"] == f"{run_id}.agent.{iteration}.1"
        assert all(e["record"]["claim_id"] == claim["claim_id"] for e in read["records"])
        assert read["last_seq"] == seq_result

        assert (await stack.ok(lease, "checkpoint", {"state": {"n": iteration + 1}}))[
            "stored"
        ] == "journal"
        assert await stack.ok(lease, "load_checkpoint") == {
            "source": "checkpoint",
            "state": {"n": iteration + 1},
            "seq": None,
        }
        if iteration < 2:
            settled = await stack.ok(lease, "continue", {"output": iteration})
            assert settled["action"] == "continue"
        else:
            settled = await stack.ok(lease, "complete", {"output": "done"})
        assert settled["journal_seq"] > seq_result
        seqs.append(settled["journal_seq"])

    view = await stack.finished(run_id)
    assert view["status"] == "completed"
    assert view["steps"][0]["output"] == "done"
    assert view["steps"][0]["iteration"] == 2


async def test_journal_read_gives_each_record_of_a_message(stack: Stack) -> None:
    """An earlier holder (a Python worker storing pairs) left its model response and the tool
    intent it led to as ONE message: ``journal/read`` gives both records, at that message's
    sequence, before the bridge holder's own claim."""
    workflow, task_type = await stack.workflow(loop=True)
    run_id = await stack.start(workflow, {"goal": "g"})
    lease = await stack.poll(task_type)
    it, att = lease["iteration"], lease["attempt"]
    subject = layout.journal_subject(run_id, "agent")
    earlier = ClaimRecord(it, att, "earlier-holder", lease["nonce"])
    s_claim = await stack.transport.publish(
        subject, encode_record(earlier), headers=record_headers(earlier),
        expected_last_subject_seq=0,
    )  # fmt: skip
    pair: list[JournalRecord] = [
        ModelRecord(it, att, "earlier-holder", 0, {"say": "hi"}),
        ToolIntentRecord(
            it, att, "earlier-holder", 1, "search", {"q": 1}, Replay.SAFE, f"{run_id}.agent.{it}.1"
        ),
    ]
    s_pair = await stack.transport.publish(
        subject, encode_group(pair), headers=group_headers(pair), expected_last_subject_seq=s_claim
    )
    read = await stack.ok(lease, "journal/read")
    got = [(e["seq"], e["record"]["type"]) for e in read["records"]]
    assert got == [
        (s_claim, "claim"), (s_pair, "model"), (s_pair, "tool.intent"), (s_pair + 1, "claim")
    ]  # fmt: skip
    assert read["records"][2]["record"]["name"] == "search"
    assert read["last_seq"] == s_pair + 1


async def test_cancelled_run_is_409_on_heartbeat_and_resolve(stack: Stack) -> None:
    workflow, task_type = await stack.workflow(loop=True)
    run_id = await stack.start(workflow)
    lease = await stack.poll(task_type)
    await stack.ok(lease, "journal/read")
    assert (await stack.ok(lease, "heartbeat"))["status"] == "ok"

    r = await stack.client.post(f"/runs/{run_id}/cancel", json={"reason": "test"})
    assert r.status_code == 202
    assert (await stack.finished(run_id))["status"] == "cancelled"
    beat = await stack.act(lease, "heartbeat")
    assert beat.status_code == 409 and error_code(beat) == "cancelled"
    done = await stack.act(lease, "complete", {"output": 1})
    assert done.status_code == 409 and error_code(done) == "cancelled"

    # Without the announcement (a second lease, leased after the cancel), the run state says so.
    other, other_type = await stack.workflow()
    other_run = await stack.start(other)
    lease2 = await stack.poll(other_type)
    await stack.service.cancel_run(other_run, "test")
    assert (await stack.finished(other_run))["status"] == RunStatus.CANCELLED.value
    resolved = await stack.act(lease2, "continue", {})
    assert resolved.status_code == 409 and error_code(resolved) == "cancelled"
    entry = await stack.transport.get_last_msg(
        layout.HISTORY_STREAM, layout.history_subject(other_run)
    )
    assert entry is not None and b"step.continue" not in entry.data


async def test_token_is_required_when_set(authed_stack: Stack) -> None:
    _, task_type = await authed_stack.workflow()
    async with httpx.AsyncClient(base_url=authed_stack.client.base_url, timeout=10.0) as bare:
        r = await bare.post(f"/bridge/tasks/{task_type}/poll")
        assert r.status_code == 401 and error_code(r) == "unauthorized"
        r = await bare.post("/bridge/leases/x/complete", headers={"authorization": "Bearer wrong"})
        assert r.status_code == 401 and error_code(r) == "unauthorized"
        r = await bare.post(
            f"/bridge/tasks/{task_type}/poll", headers={"authorization": f"Bearer {TOKEN}"}
        )
        assert r.status_code == 204
