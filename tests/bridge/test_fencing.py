"""The bridge fences like the Python SDK: successors, stale and committed redeliveries, the
restart limit, and a missing journal stream."""

from __future__ import annotations

import httpx
import trio
from journal._helpers import make_task

from dagnats_trio.api import Service
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.bridge import Bridge
from dagnats_trio.inputs import InputsService
from dagnats_trio.journal import RESTART_LIMIT_REASON, read_journal
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    encode_record,
    encode_task,
    layout,
    record_headers,
)
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import STREAMS, open_nats_transport

from ._stack import ACK_WAIT_S, RESTART_LIMIT, STACK_START_S, Stack, error_code


async def test_successor_fences_the_first_lease(stack: Stack) -> None:
    workflow, task_type = await stack.workflow()
    run_id = await stack.start(workflow)
    first = await stack.poll(task_type)
    await stack.ok(first, "journal/read")
    # The first client goes quiet: its AckWait runs out and the task is redelivered.
    second = await stack.poll(task_type)
    assert second["nonce"] == first["nonce"] and second["num_delivered"] == 2
    assert second["token"] != first["token"]
    claim = await stack.ok(second, "journal/read")

    model = {"type": "model", "call": 0, "response": "late"}
    late = await stack.act(first, "journal/append", model)
    assert late.status_code == 409 and error_code(late) == "fenced"
    done = await stack.act(first, "complete", {"output": "zombie"})
    assert done.status_code == 409 and error_code(done) == "fenced"
    beat = await stack.act(first, "heartbeat")
    assert beat.status_code == 409 and error_code(beat) == "fenced"
    view = await stack.run_view(run_id)
    assert view["status"] == "running"

    records = await read_journal(stack.transport, run_id, "agent")
    assert [type(r).__name__ for _, r in records] == ["ClaimRecord", "ClaimRecord"]
    assert all(not isinstance(r, CommitRecord) for _, r in records)

    await stack.ok(second, "complete", {"output": "successor"})
    view = await stack.finished(run_id)
    assert view["status"] == "completed" and view["steps"][0]["output"] == "successor"
    records = await read_journal(stack.transport, run_id, "agent")
    commits = [r for _, r in records if isinstance(r, CommitRecord)]
    assert len(commits) == 1 and commits[0].claim_id == claim["claim_id"]


async def test_lapsed_lease_without_claim_is_expired(stack: Stack) -> None:
    workflow, task_type = await stack.workflow()
    run_id = await stack.start(workflow)
    first = await stack.poll(task_type)
    second = await stack.poll(task_type)
    assert second["nonce"] == first["nonce"]
    r = await stack.act(first, "complete", {"output": "late"})
    assert r.status_code == 410 and error_code(r) == "lease_expired"
    await stack.ok(second, "complete", {"output": "ok"})
    assert (await stack.finished(run_id))["steps"][0]["output"] == "ok"


async def test_a_lease_whose_task_the_server_delivered_again_is_expired(stack: Stack) -> None:
    """However recent its last request: the server gave up on that delivery (here a nak
    stands for the AckWait the server counts from its delivery, before the bridge's clock)."""
    workflow, task_type = await stack.workflow()
    run_id = await stack.start(workflow)
    first = await stack.poll(task_type)
    async with stack.bridge._leases.use(first["token"]) as lease:
        await lease.delivery.nak()
    second = await stack.poll(task_type)
    assert second["nonce"] == first["nonce"] and second["num_delivered"] == 2
    r = await stack.act(first, "complete", {"output": "late"})
    assert r.status_code == 410 and error_code(r) == "lease_expired"
    await stack.ok(second, "complete", {"output": "ok"})
    assert (await stack.finished(run_id))["steps"][0]["output"] == "ok"


async def test_stale_redelivery_answers_410(stack: Stack) -> None:
    workflow, task_type = await stack.workflow(loop=True)
    run_id = await stack.start(workflow)
    zero = await stack.poll(task_type)
    await stack.ok(zero, "journal/read")
    await stack.ok(zero, "continue", {})
    one = await stack.poll(task_type)
    assert one["iteration"] == 1
    await stack.ok(one, "journal/read")

    await stack.redeliver(zero)  # a late copy of iteration 0
    late = await stack.poll(task_type)
    assert late["iteration"] == 0
    r = await stack.act(late, "journal/read")
    assert r.status_code == 410 and error_code(r) == "stale"
    again = await stack.act(late, "journal/append", {"type": "model", "call": 0, "response": 1})
    assert again.status_code == 410 and error_code(again) == "stale"

    await stack.ok(one, "complete", {"output": 1})
    assert (await stack.finished(run_id))["status"] == "completed"


async def test_committed_then_lost_ack_republishes(stack: Stack) -> None:
    workflow, task_type = await stack.workflow()
    run_id = await stack.start(workflow)
    first = await stack.poll(task_type)
    claim = await stack.ok(first, "journal/read")
    # The first holder commits and dies before its event and its ack.
    commit = CommitRecord(
        0, 1, claim["claim_id"], first["nonce"], CommitAction.COMPLETE, output="from-commit"
    )
    await stack.transport.publish(
        layout.journal_subject(run_id, "agent"),
        encode_record(commit),
        headers=record_headers(commit),
        expected_last_subject_seq=claim["last_seq"],
    )
    assert (await stack.run_view(run_id))["status"] == "running"

    await stack.redeliver(first)
    second = await stack.poll(task_type)
    r = await stack.act(second, "journal/read")
    assert r.status_code == 410 and error_code(r) == "committed"
    view = await stack.finished(run_id)
    assert view["status"] == "completed" and view["steps"][0]["output"] == "from-commit"
    records = await read_journal(stack.transport, run_id, "agent")
    assert sum(isinstance(r, CommitRecord) for _, r in records) == 1
    r = await stack.act(second, "complete", {})
    assert r.status_code == 410 and error_code(r) == "committed"


async def test_restart_limit_commits_the_failure(stack: Stack) -> None:
    workflow, task_type = await stack.workflow(max_attempts=1)
    run_id = await stack.start(workflow)
    lease = await stack.poll(task_type)
    await stack.ok(lease, "journal/read")
    for _ in range(RESTART_LIMIT - 1):
        await stack.redeliver(lease)
        lease = await stack.poll(task_type)
        await stack.ok(lease, "journal/read")
    await stack.redeliver(lease)
    last = await stack.poll(task_type)
    r = await stack.act(last, "journal/read")
    assert r.status_code == 410 and error_code(r) == "restart_limit"

    view = await stack.finished(run_id)
    assert view["status"] == "failed"
    assert view["steps"][0]["reason"] == RESTART_LIMIT_REASON
    records = await read_journal(stack.transport, run_id, "agent")
    kinds = [type(r) for _, r in records]
    assert kinds == [ClaimRecord] * (RESTART_LIMIT + 1) + [CommitRecord]
    commit = records[-1][1]
    assert isinstance(commit, CommitRecord) and commit.reason == RESTART_LIMIT_REASON
    assert commit.action is CommitAction.FAIL and commit.retriable


async def test_missing_journal_stream_is_503(fresh_nats_server: NatsServer) -> None:
    """A server where only the task stream exists: the claim cannot be stored."""
    async with open_nats_transport(fresh_nats_server.url, name="pytest-bridge") as transport:
        task_stream = next(s for s in STREAMS if s.name == layout.TASK_STREAM)
        await transport.ensure_stream(task_stream)
        bridge = Bridge(transport, ack_wait_s=ACK_WAIT_S)
        app = create_app(Service(transport), InputsService(transport), transport, bridge=bridge)
        async with trio.open_nursery() as nursery:
            with trio.fail_after(STACK_START_S):
                await nursery.start(bridge.run)
                url = await nursery.start(ApiServer(app, "127.0.0.1", 0).run)
            task = make_task("runnp1", task_type="np_task")
            await transport.publish(layout.task_subject("np_task", "runnp1"), encode_task(task))
            async with httpx.AsyncClient(base_url=url, timeout=10.0) as client:
                r = await client.post("/bridge/tasks/np_task/poll", params={"wait": "5s"})
                assert r.status_code == 200, r.text
                token = r.json()["token"]
                r = await client.post(f"/bridge/leases/{token}/journal/read")
                assert r.status_code == 503 and error_code(r) == "not_provisioned"
                r = await client.post(f"/bridge/leases/{token}/complete", json={})
                assert r.status_code == 503 and error_code(r) == "journal_unavailable"
            nursery.cancel_scope.cancel()
