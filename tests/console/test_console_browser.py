"""The console in a real browser (headless Chromium): the crash demo's story seen live, a steer
and a follow-up sent from the page, a cancel and a purge, the token prompt, and the journal
stream's reconnect after a network blip. The screenshots of docs/console.md are taken here."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from typing import Final

import trio
from playwright.async_api import Page, expect

from dagnats_trio.cli.demo import (
    SCRIPT,
    STEP_ID,
    TASK_TYPE,
    UNSAFE_TOOL,
    WORKFLOW_NAME,
    Counters,
    Crash,
    make_agent,
    workflow_definition,
)
from dagnats_trio.engine import RunSnapshot, StepStatus, decode_snapshot
from dagnats_trio.journal import RESTART_LIMIT_REASON, Replay, ScriptedModel
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    JournalRecord,
    ModelRecord,
    RunStatus,
    StepContinue,
    ToolIntentRecord,
    ToolResultRecord,
    Wait,
    encode_event,
    encode_record,
    layout,
    record_headers,
)
from dagnats_trio.server import NatsServer
from dagnats_trio.worker import Handler, Worker

from ._browser import TOKEN, ConsoleStack, in_browser, shot

FIRST_WORKER: Final = "worker-1"
SECOND_WORKER: Final = "worker-2"
#: A short AckWait, so the dead worker's task comes back quickly, yet long enough that the live
#: first worker's heartbeats keep its lease on a loaded machine (at 0.8 s a late beat let the
#: task come back to that same worker before the kill, and the page showed an early
#: interrupted row).
WORKER_ACK_WAIT_S: Final = 2.5
#: The demo's pause between turns (leaves time to steer from the page).
LOOP_DELAY: Final = "1s"
#: Bound of the tests' own waits outside the page.
WAIT_S: Final = 20.0
IDLE_WORKFLOW: Final = "console-idle"
IDLE_TASK: Final = "console_idle"
WAIT_AN_HOUR_MS: Final = 3_600_000
STEER_TEXT: Final = "Pick an aisle seat, please."
FOLLOW_UP_TEXT: Final = "And when is the return flight?"


async def start_worker(
    stack: ConsoleStack, handlers: Mapping[str, Handler], worker_id: str
) -> trio.CancelScope:
    """A worker in a scope of its own: cancelling the scope kills it (no clean stop)."""
    worker = Worker(
        stack.transport,
        handlers,
        inputs=stack.inputs,
        ack_wait_s=WORKER_ACK_WAIT_S,
        worker_id=worker_id,
    )
    scope = trio.CancelScope()

    async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await worker.run(task_status=task_status)

    await stack.nursery.start(run)
    return scope


async def wait_run(
    stack: ConsoleStack, run_id: str, ok: Callable[[RunSnapshot], bool]
) -> RunSnapshot:
    """The run's snapshot once ``ok`` holds (watch first, then read: nothing is missed)."""
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
                        return snap
    raise AssertionError("unreachable")


async def send_input(page: Page, mode: str, text: str) -> None:
    await page.select_option("#input-mode", mode)
    await page.fill("#input-text", text)
    await page.click("#input-form button[type=submit]")


async def test_crash_recovery_steer_and_follow_up_live_in_the_browser(
    console: ConsoleStack,
) -> None:
    started = time.monotonic()
    model = ScriptedModel(SCRIPT)
    counters = Counters()
    crash = Crash(FIRST_WORKER)
    handlers = {TASK_TYPE: make_agent(model, counters, crash)}
    await console.service.register_workflow(workflow_definition(LOOP_DELAY))
    first = await start_worker(console, handlers, FIRST_WORKER)
    run_id = await console.service.start_run(
        WORKFLOW_NAME, {"task": "Book me a flight to Porto on Friday", "follow_ups": 1}
    )
    with trio.fail_after(WAIT_S):
        await crash.reached.wait()

    async def kill_and_replace() -> None:
        first.cancel()
        await start_worker(console, handlers, SECOND_WORKER)

    async def script(page: Page) -> None:
        await page.goto(console.console(run_id, STEP_ID))
        timeline = page.locator("#timeline details")
        # Live: the page shows the unsafe call in flight, before the crash is recovered.
        intents = page.locator("#timeline details[data-type='tool.intent']")
        await expect(intents).to_have_count(2)
        await expect(intents.nth(1)).to_contain_text(f"{UNSAFE_TOOL}(")
        await expect(page.locator("details[data-mark=interrupted]")).to_have_count(0)
        trio.from_thread.run(kill_and_replace)
        # ... then, without a reload, the recovery as it is written.
        await expect(page.locator("details[data-type=claim][data-mark=recovered]")).to_have_count(1)
        interrupted = page.locator("details[data-type='tool.result'][data-mark=interrupted]")
        await expect(interrupted).to_contain_text(UNSAFE_TOOL)
        await expect(interrupted).to_contain_text("unsafe, so not run again")
        await expect(page.locator("details[data-type=model][data-mark=reused]")).to_have_count(1)
        await expect(page.locator("details[data-mark=reused]")).to_contain_text(UNSAFE_TOOL)

        # A steer from the page: queued, then done once the next turn answered it.
        await send_input(page, "steer", STEER_TEXT)
        steer = page.locator("#inputs tr").first
        # Every state, placed included, however fast the turn placed and answered it.
        await expect(steer).to_have_attribute("data-history", "queued placed done")
        print(f"steer states seen on the page: {await steer.get_attribute('data-history')}")
        placed = page.locator("details[data-type='input.placed']")
        await expect(placed.first).to_contain_text(STEER_TEXT)
        await expect(page.locator("#step-status")).to_have_text("waiting")
        await send_input(page, "follow_up", FOLLOW_UP_TEXT)
        await expect(page.locator("#stream-state")).to_have_text(
            "stream ended: step completed, run completed"
        )
        await expect(page.locator("#inputs tr")).to_have_count(2)
        for row in await page.locator("#inputs tr").all():
            await expect(row).to_have_attribute("data-history", "queued placed done")
        await expect(placed.nth(1)).to_contain_text(FOLLOW_UP_TEXT)
        # Opened again once both are done (no poll ever saw them placed): the same states.
        await page.reload()
        await expect(page.locator("#inputs tr")).to_have_count(2)
        for row in await page.locator("#inputs tr").all():
            await expect(row).to_have_attribute("data-history", "queued placed done")

        # The audit, and one record opened to its JSON.
        await page.click("#journal-check")
        await expect(page.locator("#check-result p")).to_have_attribute("data-ok", "true")
        await expect(page.locator("#check-result p")).to_contain_text("journal ok")
        await interrupted.locator("summary").click()
        await expect(interrupted.locator("pre")).to_be_visible()
        await expect(interrupted.locator("pre")).to_contain_text('"interrupted": true')
        count = await timeline.count()
        await shot(page, "step")

        await page.goto(console.console(run_id))
        await expect(page.locator("#run-status")).to_have_text("completed")
        await expect(page.locator(f"#steps tr[data-step={STEP_ID}]")).to_contain_text("completed")
        await expect(page.locator("#run-output")).to_contain_text("TP1951")
        await expect(page.locator("#purge")).to_be_visible()
        await expect(page.locator("#cancel")).to_be_hidden()
        await shot(page, "run")

        await page.goto(console.console())
        await expect(page.locator(f"#runs tr[data-run='{run_id}']")).to_contain_text("completed")
        await shot(page, "runs")
        print(f"journal records on the page: {count}")

    await in_browser(script)
    # What really happened, counted outside the journal and the page.
    assert counters.starts[UNSAFE_TOOL] == 1
    assert len(counters.messages_sent) == 1
    assert counters.model_calls - model.requests == 1  # the reused response
    snap = await console.service.get_run(run_id)
    assert snap.status is RunStatus.COMPLETED
    print(f"crash story in the browser: {time.monotonic() - started:.1f} s")


async def register_idle(stack: ConsoleStack) -> None:
    await stack.service.register_workflow(
        {
            "name": IDLE_WORKFLOW,
            "steps": [
                {
                    "id": "agent",
                    "task": IDLE_TASK,
                    "type": "agent_loop",
                    "agent_loop": {"max_iterations": 10},
                }
            ],
        }
    )


async def test_token_prompt_refuses_a_wrong_token_then_lists_and_filters_runs(
    console: ConsoleStack,
) -> None:
    await register_idle(console)
    running = await console.service.start_run(IDLE_WORKFLOW, {"n": 1})
    other = await console.service.start_run(IDLE_WORKFLOW, {"n": 2})
    await console.service.cancel_run(other, "not this one")
    await wait_run(console, other, lambda s: s.status is RunStatus.CANCELLED)

    async def script(page: Page) -> None:
        await page.goto(console.console())
        dialog = page.locator("#token-dialog")
        await expect(dialog).to_be_visible()
        await expect(page.locator("#token-error")).to_be_hidden()
        await page.fill("#token-input", "wrong-token")
        await page.click("#token-form button[type=submit]")
        await expect(page.locator("#token-error")).to_contain_text("refused")
        await expect(dialog).to_be_visible()
        await expect(page.locator("#runs tr[data-run]")).to_have_count(0)
        await page.fill("#token-input", TOKEN)
        await page.click("#token-form button[type=submit]")
        await expect(dialog).to_be_hidden()
        await expect(page.locator("#runs tr[data-run]")).to_have_count(2)
        # Kept for the tab: a reload does not ask again.
        await page.reload()
        await expect(page.locator("#runs tr[data-run]")).to_have_count(2)
        await expect(dialog).to_be_hidden()
        await page.select_option("#filter select[name=status]", "running")
        await page.click("#filter button[type=submit]")
        await expect(page.locator("#runs tr[data-run]")).to_have_count(1)
        await expect(page.locator(f"#runs tr[data-run='{running}']")).to_contain_text("running")
        # Paging through the API's cursor (one run a page: #/runs?limit=1).
        await page.goto(console.console() + "#/runs?limit=1")
        await expect(page.locator("#runs tr[data-run]")).to_have_count(1)
        first = await page.locator("#runs tr[data-run]").get_attribute("data-run")
        await expect(page.locator("#prev")).to_be_disabled()
        await page.click("#next")
        await expect(page.locator("#runs tr[data-run]")).not_to_have_attribute("data-run", first)
        second = await page.locator("#runs tr[data-run]").get_attribute("data-run")
        assert (first, second) == (other, running)  # newest first, across pages
        await expect(page.locator("#next")).to_be_disabled()
        await page.click("#prev")
        await expect(page.locator("#runs tr[data-run]")).to_have_attribute("data-run", first)
        await page.fill("#filter input[name=workflow]", "no-such-workflow")
        await page.click("#filter button[type=submit]")
        await expect(page.locator("#runs-note")).to_have_text("No runs match.")

    await in_browser(script, token=None)


async def test_cancel_with_reason_then_purge_from_the_run_page(console: ConsoleStack) -> None:
    await register_idle(console)
    run_id = await console.service.start_run(IDLE_WORKFLOW, None)
    reason = "the customer changed their mind"
    # The step ends its first iteration asking to wait an hour: the engine parks it.
    snap = await wait_run(console, run_id, lambda s: s.steps["agent"].dispatch is not None)
    wait = Wait(delay_ms=WAIT_AN_HOUR_MS)
    done = StepContinue(run_id, "agent", snap.steps["agent"].dispatch, wait=wait)
    await console.transport.publish(layout.history_subject(run_id), encode_event(done))
    snap = await wait_run(console, run_id, lambda s: s.steps["agent"].status is StepStatus.WAITING)
    wake_at = snap.steps["agent"].wake_at_ms
    assert wake_at is not None

    async def script(page: Page) -> None:
        # The run page shows the waiting step's timer: what it waits for, and when it wakes.
        await page.goto(console.console(run_id))
        timer = page.locator("#steps tr[data-step=agent] [data-timer=wake]")
        await expect(timer).to_have_attribute("data-due", str(wake_at))
        await expect(timer).to_contain_text(re.compile(r"^wait: wakes .* \(in 59 min \d+ s\)$"))
        await shot(page, "run-waiting")
        # No worker serves this step: a steer stays queued, and can be withdrawn from the page.
        await page.goto(console.console(run_id, "agent"))
        await send_input(page, "steer", "never mind")
        queued = page.locator("#inputs tr").first
        await expect(queued).to_have_attribute("data-history", "queued")
        await queued.locator("button.withdraw").click()
        await expect(queued).to_have_attribute("data-history", "queued withdrawn")
        await expect(queued.locator("button.withdraw")).to_have_count(0)
        await page.goto(console.console(run_id))
        await expect(page.locator("#run-status")).to_have_text("running")
        await expect(page.locator("#purge")).to_be_hidden()
        await expect(timer).to_have_attribute("data-due", str(wake_at))  # a steer wakes it not
        await page.fill("#cancel-reason", reason)
        await page.click("#cancel")
        await expect(page.locator("#run-message")).to_contain_text("Cancel requested")
        await expect(page.locator("#run-status")).to_have_text("cancelled")
        await expect(page.locator("#run-facts")).to_contain_text(reason)
        await expect(page.locator("#steps tr[data-step=agent]")).to_contain_text("cancelled")
        snap = trio.from_thread.run(console.service.get_run, run_id)
        assert snap.status is RunStatus.CANCELLED
        assert snap.steps["agent"].status is StepStatus.CANCELLED
        assert snap.error == reason
        await page.click("#purge")
        # The page says so (and stops offering cancel or purge), never a blank screen.
        await expect(page.locator("#run-message")).to_contain_text("was purged")
        await expect(page.locator("#purge")).to_be_disabled()
        # Its step page says the same, where its journal stream would be.
        await page.goto(console.console(run_id, "agent"))
        await expect(page.locator("#stream-state")).to_have_attribute("data-state", "gone")
        await expect(page.locator("#stream-state")).to_contain_text("was purged")

    await in_browser(script)
    runs = await console.service.list_runs(workflow=IDLE_WORKFLOW)
    assert run_id not in {r.run_id for r in runs.runs}


async def test_journal_stream_reconnects_after_a_blip_without_gap_or_repeat(
    console: ConsoleStack,
) -> None:
    await register_idle(console)
    run_id = await console.service.start_run(IDLE_WORKFLOW, None)
    subject = layout.journal_subject(run_id, "agent")
    seqs: list[int] = []

    async def append(record: JournalRecord) -> None:
        last = await console.transport.get_last_msg(layout.JOURNAL_STREAM, subject)
        seqs.append(
            await console.transport.publish(
                subject,
                encode_record(record),
                headers=record_headers(record),
                expected_last_subject_seq=last.seq if last is not None else 0,
            )
        )

    def model(call: int) -> ModelRecord:
        return ModelRecord(iteration=0, attempt=1, claim_id="c1", call=call, response={"n": call})

    await append(ClaimRecord(iteration=0, attempt=1, claim_id="c1", nonce="n1"))
    await append(model(0))

    async def blip() -> None:
        await console.stop_api()
        await append(model(1))  # written while the page cannot hear

    async def script(page: Page) -> None:
        await page.goto(console.console(run_id, "agent"))
        rows = page.locator("#timeline details")
        await expect(rows).to_have_count(2)
        await expect(page.locator("#stream-state")).to_have_attribute("data-state", "live")
        await expect(page.locator("#preview-state")).to_have_text("(live)")
        trio.from_thread.run(console.transport.core_publish, preview(run_id), b"Thinking ")
        await expect(page.locator("#preview")).to_have_text("Thinking ")
        trio.from_thread.run(blip)
        await expect(page.locator("#stream-state")).to_have_attribute("data-state", "reconnecting")
        await expect(page.locator("#problem")).to_contain_text("does not answer")
        trio.from_thread.run(console.start_api)
        await expect(page.locator("#stream-state")).to_have_text("live (reconnected)")
        await expect(page.locator("#problem")).to_be_hidden()
        await expect(rows).to_have_count(3)
        trio.from_thread.run(append, model(2))
        await expect(rows).to_have_count(4)
        shown = [int(s) for s in await rows.evaluate_all("ns => ns.map(n => n.dataset.seq)")]
        assert shown == seqs
        # Each record came over the wire once: the reconnect resumed with Last-Event-ID.
        await expect(page.locator("#timeline")).to_have_attribute("data-received", str(len(seqs)))
        # A new holder claims the same attempt: the records before it become "reused"; a write
        # of the old holder after that is marked fenced; a restart-limit failure is named.
        trio.from_thread.run(append, ClaimRecord(iteration=0, attempt=1, claim_id="c2", nonce="n2"))
        recovered = page.locator("details[data-type=claim][data-mark=recovered]")
        await expect(recovered).to_contain_text("new holder recovered attempt 1")
        await expect(page.locator("details[data-type=model][data-mark=reused]")).to_have_count(3)
        trio.from_thread.run(append, model(3))
        fenced = page.locator("details[data-mark=fenced]")
        await expect(fenced).to_contain_text("written after its holder was fenced")
        await expect(fenced).to_have_attribute("data-seq", str(seqs[-1]))
        limit = CommitRecord(
            0,
            1,
            "c2",
            "n2",
            CommitAction.FAIL,
            error="no progress",
            retriable=False,
            reason=RESTART_LIMIT_REASON,
        )
        trio.from_thread.run(append, limit)
        await expect(page.locator("details[data-type=commit][data-mark=failed]")).to_contain_text(
            "restart limit"
        )

    await in_browser(script)


def preview(run_id: str) -> str:
    return layout.preview_subject(run_id, "agent")


async def test_nats_down_is_said_on_the_page_and_cleared_when_it_is_back(
    console: ConsoleStack, fresh_nats_server: NatsServer
) -> None:
    await register_idle(console)
    run_id = await console.service.start_run(IDLE_WORKFLOW, None)

    async def script(page: Page) -> None:
        await page.goto(console.console(run_id))
        await expect(page.locator("#run-status")).to_have_text("running")
        await expect(page.locator("#health")).to_have_text("NATS up")
        await expect(page.locator("#problem")).to_be_hidden()
        trio.from_thread.run(fresh_nats_server.stop_process)
        await expect(page.locator("#problem")).to_contain_text("NATS is down")
        await expect(page.locator("#health")).to_have_text("NATS down")
        await expect(page.locator("#run-message")).to_contain_text("NATS is not answering")
        await shot(page, "nats-down")
        trio.from_thread.run(fresh_nats_server.start)
        await expect(page.locator("#health")).to_have_text("NATS up")
        await expect(page.locator("#problem")).to_be_hidden()
        await expect(page.locator("#run-status")).to_have_text("running")
        await expect(page.locator("#run-message")).to_have_text("")

    await in_browser(script)


async def test_a_parallel_group_and_its_cancellation_on_the_page(console: ConsoleStack) -> None:
    """A group's members are shown as such, and a member cancelled by another's failure says
    which one (issue 15 part 1)."""
    await register_idle(console)
    run_id = await console.service.start_run(IDLE_WORKFLOW, None)
    subject = layout.journal_subject(run_id, "agent")
    records: list[JournalRecord] = [
        ClaimRecord(iteration=0, attempt=1, claim_id="c1", nonce="n1"),
        ToolIntentRecord(0, 1, "c1", 0, "lookup", 1, Replay.SAFE, "k0", group=0, group_size=2),
        ToolIntentRecord(0, 1, "c1", 1, "upload", 2, Replay.UNSAFE, "k1", group=0, group_size=2),
        ToolResultRecord(0, 1, "c1", 0, error="ValueError: no such user"),
        ToolResultRecord(
            0, 1, "c1", 1, error="cancelled", interrupted=True, partial=["half"], cancelled_by=0
        ),
    ]
    last = 0
    for record in records:
        last = await console.transport.publish(
            subject,
            encode_record(record),
            headers=record_headers(record),
            expected_last_subject_seq=last,
        )

    async def script(page: Page) -> None:
        await page.goto(console.console(run_id, "agent"))
        rows = page.locator("#timeline details")
        await expect(rows).to_have_count(len(records))
        intents = page.locator("details[data-type='tool.intent']")
        await expect(intents.nth(0)).to_contain_text("parallel 1/2")
        await expect(intents.nth(1)).to_contain_text("parallel 2/2")
        cancelled = page.locator("details[data-type='tool.result'][data-mark=interrupted]")
        await expect(cancelled).to_contain_text("upload: cancelled: call 0 of its parallel group")
        await expect(cancelled).to_contain_text('partial ["half"]')

    await in_browser(script)
