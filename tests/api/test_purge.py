"""Purging a finished run on a real nats-server (and on SimTransport), with a real engine and
worker: every trace of a journal run (journal, inputs, checkpoint, signal, idempotency key,
history, child run) is gone, the key starts a new run, a running run is refused and left alone,
and an interrupted purge is finished by running it again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import attrs
import pytest
import trio

from dagnats_trio.api import RunNotFound
from dagnats_trio.api._purge import PURGE_DEPTH_MAX, child_runs, collect_tree, plan_purge
from dagnats_trio.api.service import RunRunning, Service, idempotency_kv_key
from dagnats_trio.dag import WorkflowDef
from dagnats_trio.engine import (
    RunSnapshot,
    StepState,
    StepStatus,
    child_run_id,
    decode_snapshot,
    new_run_snapshot,
)
from dagnats_trio.inputs import Mode, SubmissionStatus
from dagnats_trio.journal import Replay, ToolCall, read_journal
from dagnats_trio.protocol import (
    DispatchId,
    JsonValue,
    RunStatus,
    WorkflowStarted,
    from_json,
    layout,
)
from dagnats_trio.transport import TemporarilyUnavailable, Transport
from dagnats_trio.worker import TaskContext, UntilInput, Worker

from ._stack import ECHO_WORKFLOW, WORKER_ACK_WAIT_S, Stack, error_code, unique

#: Bound of every wait in these tests.
WAIT_S = 15.0
#: Longest the parked step's timeout is: long enough never to fire during a test.
IDLE_TIMEOUT = "1h"


async def _tool(call: ToolCall) -> JsonValue:
    return {"found": call.input}


async def agent(tc: TaskContext) -> None:
    """A journal step: a tool call, then a wait for input; the next turn places it and ends."""
    j = await tc.journal()
    placed = await tc.place_inputs(Mode.STEER)
    if tc.iteration == 0:
        await j.tool(ToolCall("lookup", {"q": "porto"}), Replay.SAFE, _tool)
        await tc.continue_(wait=UntilInput())
        return
    await tc.complete({"placed": [p.request_id for p in placed]})


async def saver(tc: TaskContext) -> None:
    """A plain step that leaves a KV checkpoint behind."""
    await tc.checkpoint({"saved": tc.run_id})
    await tc.complete("saved")


@pytest.fixture
async def stack(any_api: Stack) -> AsyncIterator[tuple[Stack, str, str]]:
    """The API stack plus a worker for this module's tasks; yields the stack, the journal
    workflow's name and an idle workflow's name (no worker serves its task); on the real
    server, then on SimTransport."""
    api = any_api
    agent_task, saver_task, idle_task = unique("pagent"), unique("psaver"), unique("pidle")
    main_wf, idle_wf = unique("purge-main"), unique("purge-idle")
    await api.service.register_workflow(
        {
            "name": main_wf,
            "steps": [
                {
                    "id": "agent",
                    "task": agent_task,
                    "type": "agent_loop",
                    "agent_loop": {"max_iterations": 5},
                },
                {"id": "saver", "task": saver_task},
                {
                    "id": "child",
                    "type": "sub_workflow",
                    "sub_workflow": {"workflow": ECHO_WORKFLOW},
                },
            ],
        }
    )
    await api.service.register_workflow(
        {"name": idle_wf, "steps": [{"id": "wait", "task": idle_task, "timeout": IDLE_TIMEOUT}]}
    )
    worker = Worker(
        api.transport,
        {agent_task: agent, saver_task: saver},
        inputs=api.inputs,
        ack_wait_s=WORKER_ACK_WAIT_S,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(worker.run)
        yield api, main_wf, idle_wf
        nursery.cancel_scope.cancel()


async def wait_run(stack: Stack, run_id: str, ok: Callable[[RunSnapshot], bool]) -> RunSnapshot:
    key = layout.run_key(run_id)
    with trio.fail_after(WAIT_S):
        async with stack.transport.kv_watch(layout.RUNS_BUCKET, key) as changes:
            snap = await stack.service.get_run(run_id)
            if ok(snap):
                return snap
            async for entry in changes:
                if entry.key == key and entry.value is not None:
                    snap = decode_snapshot(entry.value)
                    if ok(snap):
                        # As ``get_run`` gives it: the definition the engine names by reference.
                        return await stack.service.with_definition(snap)
    raise AssertionError("unreachable")


async def wait_inputs_closed(stack: Stack, run_id: str, step_id: str) -> None:
    """Until the engine has settled the finished step's inputs (it closes the step's index):
    the last write the engine makes for a finished step, which a purge must come after."""
    key = f"{run_id}.{step_id}"

    def closed(value: bytes | None) -> bool:
        return value is not None and bool(from_json(value, dict[str, Any], "index").get("closed"))

    with trio.fail_after(WAIT_S):
        async with stack.transport.kv_watch(layout.INPUTS_BUCKET, key) as changes:
            entry = await stack.transport.kv_get(layout.INPUTS_BUCKET, key)
            if closed(entry.value if entry is not None else None):
                return
            async for change in changes:
                if change.key == key and closed(change.value):
                    return


async def finished_journal_run(stack: Stack, workflow: str, idem: str) -> RunSnapshot:
    """A completed run with a journal, a placed input, a checkpoint, a signal and a child run."""
    run_id = await stack.service.start_run(workflow, {"prompt": "hi"}, idempotency_key=idem)
    await stack.service.send_signal(run_id, "approve", {"by": "test"})

    def waiting(s: RunSnapshot) -> bool:
        return s.steps["agent"].status is StepStatus.WAITING

    await wait_run(stack, run_id, waiting)
    _, created = await stack.inputs.submit(run_id, "agent", "msg-1", Mode.STEER, {"t": "go"})
    assert created
    snap = await wait_run(stack, run_id, lambda s: s.status.finished)
    assert snap.status is RunStatus.COMPLETED, snap
    assert snap.steps["agent"].output == {"placed": ["msg-1"]}
    with trio.fail_after(WAIT_S):
        while (await stack.inputs.get(run_id, "agent", "msg-1")).status is not (
            SubmissionStatus.DONE
        ):
            await stack.inputs.get(run_id, "agent", "msg-1", wait_s=1.0)
    for step_id in snap.steps:
        await wait_inputs_closed(stack, run_id, step_id)
    return snap


async def subject_msgs(t: Transport, stream: str, subject: str) -> int:
    return len(await t.read_subject(stream, subject, 1, 10))


async def traces(stack: Stack, snap: RunSnapshot, task_types: list[str]) -> dict[str, Any]:
    """Everything of the run that NATS still holds, by where it is; empty when purged."""
    t = stack.transport
    run = snap.run_id
    found: dict[str, Any] = {}

    def note(where: str, value: Any) -> None:
        if value:
            found[where] = value

    note("history", await subject_msgs(t, layout.HISTORY_STREAM, layout.history_subject(run)))
    for task in task_types:
        subject = layout.task_subject(task, run)
        note(subject, await subject_msgs(t, layout.TASK_STREAM, subject))
    for sid in snap.steps:
        journal = layout.journal_subject(run, sid)
        note(journal, await subject_msgs(t, layout.JOURNAL_STREAM, journal))
        timer = layout.timer_subject(run, sid)
        note(timer, await subject_msgs(t, layout.TIMER_STREAM, timer))
        note(f"journal {sid}", await read_journal(t, run, sid))
        cp = await t.kv_get(layout.CHECKPOINTS_BUCKET, layout.checkpoint_key(run, sid))
        note(f"checkpoint {sid}", cp)
    note("signals", await t.kv_keys(layout.SIGNALS_BUCKET, f"{run}."))
    note("inputs", await t.kv_keys(layout.INPUTS_BUCKET, f"{run}."))
    if snap.idempotency_key is not None:
        key = idempotency_kv_key(snap.idempotency_key)
        note("idempotency key", await t.kv_get(layout.RUNS_BUCKET, key))
    note("snapshot", await t.kv_get(layout.RUNS_BUCKET, layout.run_key(run)))
    return found


async def test_a_finished_journal_run_is_purged_with_its_child(
    stack: tuple[Stack, str, str],
) -> None:
    api, main_wf, _ = stack
    idem = unique("idem")
    snap = await finished_journal_run(api, main_wf, idem)
    assert snap.definition is not None
    tasks = [s.task for s in snap.definition.steps if s.task]
    child_id = snap.steps["child"].child_run_id
    assert child_id is not None
    child = await api.service.get_run(child_id)
    assert child.status is RunStatus.COMPLETED
    await wait_inputs_closed(api, child_id, "echo")

    before = await traces(api, snap, tasks)
    for where in ("history", "journal agent", "checkpoint saver", "signals", "inputs"):
        assert where in before, (where, before)
    assert before["signals"] == [f"{snap.run_id}.approve"]
    assert f"{snap.run_id}.agent.msg-1" in before["inputs"]
    assert "idempotency key" in before and "snapshot" in before
    assert "snapshot" in await traces(api, child, [])
    # The key still names the run: a repeat returns it.
    assert await api.service.start_run(main_wf, None, idempotency_key=idem) == snap.run_id

    r = await api.client.delete(f"/runs/{snap.run_id}")
    assert r.status_code == 204, r.text
    assert r.content == b""

    assert await traces(api, snap, tasks) == {}
    assert await traces(api, child, []) == {}
    r = await api.client.get(f"/runs/{snap.run_id}")
    assert r.status_code == 404 and error_code(r) == "run_not_found"
    r = await api.client.get(f"/runs/{child_id}")
    assert r.status_code == 404
    r = await api.client.get(f"/runs/{snap.run_id}/steps/agent/journal")
    assert r.status_code == 404
    assert await read_journal(api.transport, snap.run_id, "agent") == []

    # Purged twice: the run is unknown now.
    r = await api.client.delete(f"/runs/{snap.run_id}")
    assert r.status_code == 404 and error_code(r) == "run_not_found"
    with pytest.raises(RunNotFound):
        await api.service.purge_run(snap.run_id)

    # The idempotency key is free again: it starts a new run, which finishes normally.
    again = await api.service.start_run(ECHO_WORKFLOW, 1, idempotency_key=idem)
    assert again != snap.run_id
    done = await wait_run(api, again, lambda s: s.status.finished)
    assert done.status is RunStatus.COMPLETED and done.idempotency_key == idem


async def test_a_running_run_is_refused_and_left_in_place_then_purged_once_cancelled(
    stack: tuple[Stack, str, str],
) -> None:
    api, _, idle_wf = stack
    task = (await api.service.get_workflow(idle_wf)).steps[0].task
    run_id = await api.service.start_run(idle_wf, None)
    snap = await wait_run(api, run_id, lambda s: s.steps["wait"].status is StepStatus.RUNNING)
    await api.service.send_signal(run_id, "nudge", 1)
    _, created = await api.inputs.submit(run_id, "wait", "early", Mode.STEER, "hello")
    assert created
    before = await traces(api, snap, [task])
    assert {"history", "signals", "inputs", "snapshot"} <= set(before)

    r = await api.client.delete(f"/runs/{run_id}")
    assert r.status_code == 409 and error_code(r) == "run_running"
    assert "still running" in r.json()["error"]["message"]
    with pytest.raises(RunRunning):
        await api.service.purge_run(run_id)
    after = await traces(api, snap, [task])
    for where, value in before.items():
        assert after[where] == value, where
    assert (await api.service.get_run(run_id)).status is RunStatus.RUNNING

    await api.service.cancel_run(run_id)
    cancelled = await wait_run(api, run_id, lambda s: s.status is RunStatus.CANCELLED)
    await wait_inputs_closed(api, run_id, "wait")
    # The engine handles a run's events in order, so the dispatch's task message and timeout
    # timer were stored before the cancel was applied; the run's end removed its tasks and its
    # pending timer (the task and timer streams keep them until then).
    left = await traces(api, cancelled, [task])
    assert layout.task_subject(task, run_id) not in left
    assert layout.timer_subject(run_id, "wait") not in left
    assert cancelled.timers_armed
    assert (await api.inputs.get(run_id, "wait", "early")).status is SubmissionStatus.UNANSWERED

    assert await api.service.purge_run(run_id) == (run_id,)
    assert await traces(api, cancelled, [task]) == {}


class FailSnapshotDeleteOnce:
    """A transport whose first delete of one run snapshot fails, as a crash there would."""

    def __init__(self, inner: Transport, run_id: str) -> None:
        self._inner = inner
        self._key = layout.run_key(run_id)
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def kv_delete(self, bucket: str, key: str, revision: int | None = None) -> None:
        if bucket == layout.RUNS_BUCKET and key == self._key and not self.failed:
            self.failed += 1
            raise TemporarilyUnavailable("injected: the snapshot delete was lost")
        await self._inner.kv_delete(bucket, key, revision)


async def test_an_interrupted_purge_is_finished_by_running_it_again(
    stack: tuple[Stack, str, str],
) -> None:
    api, main_wf, _ = stack
    snap = await finished_journal_run(api, main_wf, unique("idem"))
    child_id = snap.steps["child"].child_run_id
    assert child_id is not None
    flaky = FailSnapshotDeleteOnce(api.transport, snap.run_id)
    with pytest.raises(TemporarilyUnavailable):
        await Service(cast(Transport, flaky)).purge_run(snap.run_id)
    assert flaky.failed == 1
    # Everything but the snapshot is gone, and the run is still there to purge again.
    assert set(await traces(api, snap, [])) == {"snapshot"}
    r = await api.client.get(f"/runs/{snap.run_id}")
    assert r.status_code == 200 and r.json()["status"] == "completed"

    assert await Service(cast(Transport, flaky)).purge_run(snap.run_id) == (snap.run_id,)
    assert await traces(api, snap, []) == {}
    r = await api.client.delete(f"/runs/{snap.run_id}")
    assert r.status_code == 404


# --- the pure parts ------------------------------------------------------------------------


def _snapshot(run_id: str, definition: WorkflowDef, **kw: Any) -> RunSnapshot:
    started = WorkflowStarted(run_id=run_id, workflow=definition.name, idempotency_key="k")
    snap = new_run_snapshot(started, definition, 0)
    return snap if not kw else attrs.evolve(snap, **kw)


def test_the_plan_names_every_subject_and_key_of_the_run() -> None:
    wf = WorkflowDef.from_json(
        {
            "name": "w",
            "steps": [
                {"id": "a", "task": "ta"},
                {"id": "b", "task": "ta", "depends_on": ["a"]},
                {"id": "c", "task": "tc"},
                {"id": "s", "type": "sub_workflow", "sub_workflow": {"workflow": "x"}},
            ],
        }
    )
    plan = plan_purge(_snapshot("r1", wf), None, "idem.abc")
    subjects = {(s.stream, s.subject) for s in plan.subjects}
    assert (layout.HISTORY_STREAM, "history.r1") in subjects
    assert {(layout.TASK_STREAM, "task.ta.r1"), (layout.TASK_STREAM, "task.tc.r1")} <= subjects
    assert not any(s.startswith("task..") for _, s in subjects)  # no task for sub_workflow
    for sid in "abcs":
        assert (layout.JOURNAL_STREAM, f"journal.r1.{sid}") in subjects
        assert (layout.TIMER_STREAM, f"sleep.r1.{sid}") in subjects
    assert len(plan.subjects) == len(subjects)  # each subject once
    assert {k.key for k in plan.keys} == {"r1.a", "r1.b", "r1.c", "r1.s"}
    assert {(p.bucket, p.key) for p in plan.prefixes} == {
        (layout.SIGNALS_BUCKET, "r1."),
        (layout.INPUTS_BUCKET, "r1."),
    }
    assert plan.idempotency is not None and plan.idempotency.key == "idem.abc"
    assert plan.snapshot.key == "run.r1"
    assert plan_purge(_snapshot("r1", wf), None, None).idempotency is None


async def test_child_runs_are_found_per_attempt_and_depth_is_bounded() -> None:
    wf = WorkflowDef.from_json(
        {
            "name": "nest",
            "steps": [{"id": "s", "type": "sub_workflow", "sub_workflow": {"workflow": "nest"}}],
        }
    )

    def nested(run_id: str, attempts: int) -> RunSnapshot:
        snap = _snapshot(run_id, wf)
        step = StepState(
            "s",
            status=StepStatus.COMPLETED,
            dispatch=DispatchId(0, attempts, "n"),
            child_run_id=child_run_id(run_id, "s", attempts),
        )
        return attrs.evolve(snap, steps={"s": step})

    root = nested("root", 2)
    assert child_runs(root) == (child_run_id("root", "s", 1), child_run_id("root", "s", 2))

    store: dict[str, RunSnapshot] = {}

    async def load(run_id: str) -> RunSnapshot | None:
        return store.get(run_id)

    # Attempt 1's child is gone (already purged), attempt 2's has one child of its own.
    mid_id = child_run_id("root", "s", 2)
    store[mid_id] = nested(mid_id, 1)
    tree = await collect_tree(root, load)
    assert [s.run_id for s in tree.runs] == [mid_id, "root"]
    assert child_run_id("root", "s", 1) in tree.orphans
    assert not tree.truncated

    # A chain deeper than the bound is refused, not cut silently.
    run = "d0"
    chain = nested(run, 1)
    for _ in range(PURGE_DEPTH_MAX + 1):
        nxt = child_run_id(run, "s", 1)
        store[nxt] = nested(nxt, 1)
        run = nxt
    assert (await collect_tree(chain, load)).truncated
