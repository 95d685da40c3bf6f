"""``dagnats demo``: a crash in the middle of an unsafe tool call, recovered, steered, audited.

Everything a person would do goes through the REST API (httpx), as it would from another
process: registering the workflow, starting the run, reading it, sending inputs, reading the
journal. Only the workers are in-process, because the demo kills one of them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Final

import attrs
import trio
from rich.console import Console
from rich.rule import Rule

from ..._host import Host, HostConfig, HostInfo, Listen
from ...api import RunView, StepView, console_url
from ...engine import StepStatus
from ...journal import ScriptedModel
from ...protocol import RunStatus
from ...worker import DEFAULT_ACK_WAIT_S, Handler, Worker
from .._client import ApiClient
from .._journal import Mark, check_run, decode_entries, timeline
from .._render import check_renderable, timeline_table
from ._agent import (
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

#: AckWait of the demo's workers: how long a dead worker's task waits before redelivery (the
#: default, so the demo shows what a deployment gets).
DEMO_ACK_WAIT_S: Final = DEFAULT_ACK_WAIT_S
#: Pause the engine keeps between turns, so the steer lands in the next tool round.
DEMO_LOOP_DELAY: Final = "1s"
#: Bound of the whole demo and of each wait in it.
DEMO_TIMEOUT_S: Final = 60.0
STEP_WAIT_S: Final = 20.0
#: How often the demo looks at the run while it waits for a state.
POLL_INTERVAL_S: Final = 0.05
FIRST_WORKER: Final = "worker-1"
SECOND_WORKER: Final = "worker-2"
STEER_ID: Final = "steer-1"
FOLLOW_UP_ID: Final = "follow-1"
STEER_CONTENT: Final = {"text": "Pick an aisle seat, please."}
FOLLOW_UP_CONTENT: Final = {"text": "And when is the return flight?"}


@attrs.frozen
class DemoResult:
    """What the demo saw; ``ok`` is what its exit code says."""

    run_status: RunStatus
    journal_ok: bool
    unsafe_starts: int
    messages_sent: int
    model_requests: int
    model_calls: int
    reused: int
    interrupted: int
    inputs_placed: tuple[str, ...]
    nats_url: str
    store_dir: str
    run_id: str
    console_url: str

    @property
    def ok(self) -> bool:
        return (
            self.run_status is RunStatus.COMPLETED
            and self.journal_ok
            and self.unsafe_starts == 1
            and self.messages_sent == 1
        )


def _demo_worker(info: HostInfo, handlers: Mapping[str, Handler], worker_id: str) -> Worker:
    """One of the demo's two workers: the short AckWait lets the second take over quickly."""
    return Worker(
        info.transport,
        handlers,
        inputs=info.inputs,
        ack_wait_s=DEMO_ACK_WAIT_S,
        worker_id=worker_id,
    )


async def _wait_for(
    api: ApiClient, run_id: str, what: str, done: Callable[[RunView, StepView], bool]
) -> RunView:
    with trio.fail_after(STEP_WAIT_S):
        while True:
            run = await api.get_run(run_id)
            step = next(s for s in run.steps if s.step_id == STEP_ID)
            if done(run, step):
                return run
            if run.status.finished:
                raise RuntimeError(f"the run {run.status.value} while waiting for {what}")
            await trio.sleep(POLL_INTERVAL_S)


async def run_demo(
    console: Console,
    *,
    keep_until: trio.Event | None = None,
    on_result: Callable[[DemoResult], None] | None = None,
) -> DemoResult:
    """Run the whole demo; everything it started is stopped when this returns or raises.

    It ends by printing the console's address on the demo's run. With ``keep_until`` the host
    stays up after the story (``on_result`` gets the result first) until that event is set, so
    the console can be read; without it, everything stops at once.
    """
    say = console.print
    async with trio.open_nursery() as nursery:
        with trio.fail_after(DEMO_TIMEOUT_S):
            config = HostConfig(listen=Listen("127.0.0.1", 0), inputs_endpoints=False)
            info: HostInfo = await nursery.start(Host(config).run)
            assert info.server is not None and info.api_url is not None
            say(f"embedded nats-server  {info.nats_urls[0]}  (store {info.server.store_dir})")
            say(f"engine + REST API     {info.api_url}")
            async with ApiClient(info.api_url) as api:
                result = await _story(console, nursery, info, api)
        if on_result is not None:
            on_result(result)
        if keep_until is not None:
            say(Rule())
            say(f"console  {result.console_url}", highlight=False, soft_wrap=True)
            say("kept open (--keep): the console shows the run; Ctrl-C to stop")
            await keep_until.wait()
        nursery.cancel_scope.cancel()
    say(Rule())
    say("stopped: nats-server, engine, API and workers; the temporary store is removed")
    if keep_until is None:
        say(
            f"console  {result.console_url}  (it stopped with the demo: "
            "`dagnats demo --keep` keeps it open until Ctrl-C)",
            highlight=False,
            soft_wrap=True,
        )
    return result


async def _story(
    console: Console, nursery: trio.Nursery, info: HostInfo, api: ApiClient
) -> DemoResult:
    say = console.print
    assert info.server is not None
    model = ScriptedModel(SCRIPT)
    counters = Counters()
    crash = Crash(FIRST_WORKER)
    agent = make_agent(model, counters, crash)
    handlers = {TASK_TYPE: agent}

    await api.register_workflow(json.dumps(workflow_definition(DEMO_LOOP_DELAY)).encode())
    say(Rule("1. a tool-using agent"))
    say(f"registered workflow [bold]{WORKFLOW_NAME}[/]: one agent_loop step [bold]{STEP_ID}[/]")
    first = _demo_worker(info, handlers, FIRST_WORKER)
    first_scope = trio.CancelScope()

    async def run_first(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with first_scope:
            await first.run(task_status=task_status)

    await nursery.start(run_first)
    run_id = await api.start_run(
        WORKFLOW_NAME, {"task": "Book me a flight to Porto on Friday", "follow_ups": 1}
    )
    say(f"started run [bold]{run_id}[/] on {FIRST_WORKER} (search: safe, {UNSAFE_TOOL}: unsafe)")

    with trio.fail_after(STEP_WAIT_S):
        await crash.reached.wait()
    first_scope.cancel()
    say(Rule("2. the worker dies in the middle of the unsafe turn"))
    say(
        f"{FIRST_WORKER} was killed inside [bold]{UNSAFE_TOOL}[/]: the message went out, "
        "its result was never recorded"
    )
    second = _demo_worker(info, handlers, SECOND_WORKER)
    started = trio.current_time()
    await nursery.start(second.run)
    say(f"{SECOND_WORKER} started; the task comes back after the AckWait ({DEMO_ACK_WAIT_S:g} s)")
    await _wait_for(api, run_id, "the recovered turn", lambda r, s: s.iterations >= 2)
    say(
        f"{SECOND_WORKER} recovered the turn in {trio.current_time() - started:.1f} s: it reused "
        f"the recorded model response and did not start {UNSAFE_TOOL} again"
    )

    say(Rule("3. a person steers, then follows up"))
    sub, _ = await api.submit_input(run_id, STEP_ID, STEER_ID, "steer", STEER_CONTENT)
    say(
        f"POST .../steps/{STEP_ID}/inputs  steer {STEER_ID} {json.dumps(STEER_CONTENT)} "
        f"-> {sub.status.value}"
    )
    await _wait_for(
        api, run_id, "the answer", lambda r, s: s.status is StepStatus.WAITING and s.iterations >= 4
    )
    say("the agent answered and now waits for input (no worker is busy while it waits)")
    sub, _ = await api.submit_input(run_id, STEP_ID, FOLLOW_UP_ID, "follow_up", FOLLOW_UP_CONTENT)
    say(
        f"POST .../steps/{STEP_ID}/inputs  follow_up {FOLLOW_UP_ID} "
        f"{json.dumps(FOLLOW_UP_CONTENT)} -> {sub.status.value}"
    )
    run = await _wait_for(api, run_id, "the run to finish", lambda r, s: r.status.finished)
    say(f"run {run.status.value}: {json.dumps(run.output)}")
    statuses = []
    for request_id in (STEER_ID, FOLLOW_UP_ID):
        final = await api.get_input(run_id, STEP_ID, request_id)
        statuses.append(f"{request_id}: {final.status.value} (iteration {final.placed_iteration})")
    say("inputs  " + ", ".join(statuses))

    say(Rule("4. the journal"))
    records, _ = decode_entries(await api.journal_all(run_id, STEP_ID))
    rows = timeline(records)
    console.print(timeline_table(rows, title=f"journal.{run_id}.{STEP_ID}"))
    reused = sum(1 for r in rows if r.mark is Mark.REUSED)
    interrupted = sum(1 for r in rows if r.mark is Mark.INTERRUPTED)
    placed = tuple(r.detail.split(":", 1)[0] for r in rows if r.mark is Mark.INPUT)
    starts = counters.starts.get(UNSAFE_TOOL, 0)
    say(
        f"{UNSAFE_TOOL} started {starts} time(s), messages sent: {len(counters.messages_sent)} "
        f"(counted outside the journal)"
    )
    say(
        f"model: {model.requests} requests for {counters.model_calls} calls "
        f"({counters.model_calls - model.requests} reused after the crash)"
    )
    say(f"calls reused: {reused}, interrupted: {interrupted}; inputs placed: {', '.join(placed)}")

    say(Rule("5. dagnats journal check"))
    checked = await check_run(api, run_id)
    console.print(check_renderable(checked))
    return DemoResult(
        run_status=run.status,
        journal_ok=checked.ok and bool(checked.steps),
        unsafe_starts=starts,
        messages_sent=len(counters.messages_sent),
        model_requests=model.requests,
        model_calls=counters.model_calls,
        reused=reused,
        interrupted=interrupted,
        inputs_placed=placed,
        nats_url=info.nats_urls[0],
        store_dir=str(info.server.store_dir),
        run_id=run_id,
        console_url=console_url(info.api_url or "", run_id),
    )
