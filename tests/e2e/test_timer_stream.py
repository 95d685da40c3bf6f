"""The timer stream on a real nats-server (issue 12, fsynced writes per run): a fired timer's ack
removes nothing (a work queue's ack writes a tombstone the file store fsyncs), each timer is
stored once and fires once, a run's timers (fired or pending) stay until the run ends and then
go in one purge, the engine's timer loop goes on past a timer purged while it was pending; and
a store whose timer stream an earlier version made a work queue keeps it and still runs.

The run of these tests loops three iterations: the first two end with a short delay wait, the
third holds until the test lets it finish; its step has a timeout of an hour, so each of the
three dispatches arms a timeout timer that is still pending when the run ends: 5 timers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from dagnats_trio.engine import TIMER_TIMEOUT, ArmTimer, Park, StepStatus, arm_timer
from dagnats_trio.engine import timer_consumer as engine_timer_consumer
from dagnats_trio.protocol import RunStatus, TimerFired, decode_event, layout
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import (
    DEFAULT_MAX_ACK_PENDING,
    StreamSpec,
    TrioNatsTransport,
    open_trio_nats_transport,
    provision,
)
from dagnats_trio.worker import Delay, TaskContext

from ._stack import WAIT_S, Part, Stack, new_engine, new_worker, open_stack, uid

#: The timer stream as the version before this one provisioned it.
OLD_TIMER_STREAM = StreamSpec(layout.TIMER_STREAM, ("sleep.*.*",), work_queue=True)
#: Pause between two reads of the stream's state.
POLL_S: Final = 0.02
#: The delay of each of the two waits.
WAIT_DELAY_S: Final = 0.05
#: Delay waits per run, and dispatches (each arms a timeout timer).
WAITS: Final = 2
DISPATCHES: Final = WAITS + 1
#: Bound on the history records read back for one run.
HISTORY_READ_MAX: Final = 1000
#: Timers armed an hour ahead, as many as the server's default ``max_ack_pending``: all
#: pending at once (nakked until due), they fill a consumer that has that limit.
FAR_TIMERS: Final = DEFAULT_MAX_ACK_PENDING
FAR_TIMER_DELAY_MS: Final = 3_600_000
#: Publishes of far timers in flight at once.
ARM_CONCURRENCY: Final = 20


@attrs.frozen
class StreamState:
    messages: int
    first_seq: int
    last_seq: int
    num_deleted: int


async def timer_state(t: TrioNatsTransport) -> StreamState:
    s = (await t.stream_info(layout.TIMER_STREAM))["state"]
    return StreamState(s["messages"], s["first_seq"], s["last_seq"], s.get("num_deleted", 0))


def retention(info: dict[str, Any]) -> str:
    return str(info["config"]["retention"])


@asynccontextmanager
async def store(server: NatsServer, *, old: bool) -> AsyncIterator[TrioNatsTransport]:
    async with open_trio_nats_transport(server.url, name="timer-stream") as t:
        if old:
            await t.ensure_stream(OLD_TIMER_STREAM)
        await provision(t)
        yield t


async def waiting_loop(stack: Stack, task: str) -> str:
    return await stack.workflow(
        {
            "name": uid("wf"),
            "steps": [
                {
                    "id": "l",
                    "task": task,
                    "type": "agent_loop",
                    "agent_loop": {"max_iterations": 5},
                    "timeout": "1h",
                }
            ],
        }
    )


def handler(gate: trio.Event) -> Any:
    async def loop(tc: TaskContext) -> None:
        if tc.iteration < WAITS:
            await tc.continue_(tc.iteration, wait=Delay(seconds=WAIT_DELAY_S))
            return
        await gate.wait()
        await tc.complete({"iterations": tc.iteration})

    return loop


async def timers_fired(t: TrioNatsTransport, run: str) -> list[TimerFired]:
    msgs = await t.read_subject(
        layout.HISTORY_STREAM, layout.history_subject(run), 1, HISTORY_READ_MAX
    )
    events = [decode_event(m.data) for m in msgs]
    return [e for e in events if isinstance(e, TimerFired)]


async def wait_state(t: TrioNatsTransport, messages: int) -> StreamState:
    """The timer stream's state once it holds ``messages``."""
    with trio.fail_after(WAIT_S):
        while True:
            state = await timer_state(t)
            if state.messages == messages:
                return state
            await trio.sleep(POLL_S)


async def timer_consumer(t: TrioNatsTransport) -> dict[str, Any]:
    """The engines' timer consumer's info (``delivered``, ``ack_floor``, ``num_ack_pending``)."""
    info = f"$JS.API.CONSUMER.INFO.{layout.TIMER_STREAM}.{layout.TIMER_DURABLE}"
    answer: dict[str, Any] = json.loads(await t.request(info, b""))
    return answer


async def wait_delivered(t: TrioNatsTransport, seq: int, ack_pending: int | None = None) -> None:
    """Until the timer consumer has delivered everything up to ``seq`` (and, if given, holds
    ``ack_pending`` deliveries not acked)."""
    with trio.fail_after(WAIT_S):
        while True:
            info = await timer_consumer(t)
            if info.get("delivered", {}).get("stream_seq", 0) >= seq and (
                ack_pending is None or info.get("num_ack_pending") == ack_pending
            ):
                return
            await trio.sleep(POLL_S)


async def run_through_waits(t: TrioNatsTransport, stack: Stack, gate: trio.Event) -> str:
    """Start the run; return once both waits fired and the last iteration runs."""
    run, _ = await run_through_waits_with(t, stack, gate)
    return run


async def run_through_waits_with(
    t: TrioNatsTransport, stack: Stack, gate: trio.Event
) -> tuple[str, Part]:
    """:func:`run_through_waits`, and the engine's part."""
    task = uid("tw")
    wf = await waiting_loop(stack, task)
    engine = await stack.start(new_engine(t, stack.inputs))
    await stack.start(new_worker(t, stack.inputs, {task: handler(gate)}))
    run = await stack.service.start_run(wf, None)

    def last_iteration_runs(s: Any) -> bool:
        st = s.steps["l"]
        return st.status is StepStatus.RUNNING and st.dispatch.iteration == WAITS

    await stack.wait_run(run, last_iteration_runs)
    return run, engine


async def test_fired_timers_stay_until_their_run_ends_then_go_in_one_purge(
    fresh_nats_server: NatsServer,
) -> None:
    async with store(fresh_nats_server, old=False) as t, open_stack(t) as stack:
        assert retention(await t.stream_info(layout.TIMER_STREAM)) == "limits"
        # The stream holds its sentinel only (stored when provisioned, at the first sequence).
        before = await timer_state(t)
        assert before == StreamState(1, 1, 1, 0)
        gate = trio.Event()
        run = await run_through_waits(t, stack, gate)
        # Both waits fired and woke the step; their timers and the three dispatches' timeout
        # timers are each stored once (nothing else was), and none is removed: no tombstone.
        # (The last dispatch's timeout timer is published just after its snapshot is saved.)
        mid = await wait_state(t, 1 + WAITS + DISPATCHES)
        assert mid == StreamState(1 + WAITS + DISPATCHES, 1, 1 + WAITS + DISPATCHES, 0)
        fired = await timers_fired(t, run)
        assert [e.kind for e in fired] == ["wait"] * WAITS
        # The consumer took all five and acked the two fired ones (the three timeouts are
        # pending, nakked until due), which the stream still holds: the ack removed nothing.
        await wait_delivered(t, mid.last_seq, ack_pending=DISPATCHES)
        assert (await timer_state(t)) == mid
        gate.set()
        snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.COMPLETED
        assert snap.output == {"iterations": WAITS}
        assert snap.timers_armed
        # The run's end removed all five (the three pending timeouts too) in one purge:
        # nothing more stored, every timer's sequence gone, the sentinel left (the stream never
        # empties: its block file stays, transport.provision).
        after = await wait_state(t, 1)
        assert after == StreamState(1, 1, mid.last_seq, WAITS + DISPATCHES)
        # Each wait fired once; the purged timeouts never fired.
        assert [e.kind for e in await timers_fired(t, run)] == ["wait"] * WAITS
        print(
            f"\nSLEEP_TIMERS, one run ({WAITS} waits, {DISPATCHES} dispatches with a timeout): "
            f"stored {mid.last_seq - 1}, removed before the end {mid.last_seq - mid.messages}, "
            f"one purge at the end: {mid.last_seq} fsynced writes"
        )


async def test_a_timer_consumer_created_again_is_offered_the_fired_timers_and_drops_them(
    fresh_nats_server: NatsServer,
) -> None:
    """Someone deletes the engines' timer consumer: the one the next engine creates is offered
    every stored timer of the runs not ended, the fired ones too. Each fires again as the same
    ``timer.fired`` (its msg id is the timer's id: the history stream drops it within its
    duplicate window, the engine's acceptance rule after it), so the run moves on once."""
    async with store(fresh_nats_server, old=False) as t, open_stack(t) as stack:
        gate = trio.Event()
        run, first = await run_through_waits_with(t, stack, gate)
        mid = await wait_state(t, 1 + WAITS + DISPATCHES)
        await wait_delivered(t, mid.last_seq, ack_pending=DISPATCHES)
        first.stop()
        await first.done.wait()
        delete = f"$JS.API.CONSUMER.DELETE.{layout.TIMER_STREAM}.{layout.TIMER_DURABLE}"
        assert json.loads(await t.request(delete, b"")).get("success") is True
        again = new_engine(t, stack.inputs)
        await stack.start(again)
        # The new consumer took all five again and acked the two fired ones again, each after
        # the engine published its timer.fired again.
        await wait_delivered(t, mid.last_seq, ack_pending=DISPATCHES)
        assert again.stats.timers_fired == WAITS
        assert [e.kind for e in await timers_fired(t, run)] == ["wait"] * WAITS
        gate.set()
        snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.COMPLETED
        assert snap.output == {"iterations": WAITS}
        assert snap.steps["l"].iterations == WAITS + 1


async def test_a_pending_timer_of_a_cancelled_run_is_purged_and_timers_go_on(
    fresh_nats_server: NatsServer,
) -> None:
    async with store(fresh_nats_server, old=False) as t, open_stack(t) as stack:
        long_task = uid("tl")
        engine = new_engine(t, stack.inputs)

        async def wait_an_hour(tc: TaskContext) -> None:
            await tc.continue_(None, wait=Delay(hours=1))

        gate = trio.Event()
        gate.set()
        short_task = uid("ts")
        long_wf = await waiting_loop(stack, long_task)
        short_wf = await waiting_loop(stack, short_task)
        await stack.start(engine)
        await stack.start(
            new_worker(t, stack.inputs, {long_task: wait_an_hour, short_task: handler(gate)})
        )
        waiting = await stack.service.start_run(long_wf, None)
        await stack.wait_run(waiting, lambda s: s.steps["l"].park is Park.WAIT)
        wake = layout.timer_subject(waiting, "l")
        # Let the engine's timer loop take the hour's timer (it naks it until due).
        wake_seq = (await t.get_last_msg(layout.TIMER_STREAM, wake)).seq
        await wait_delivered(t, wake_seq)
        await stack.service.cancel_run(waiting)
        snap = await stack.wait_run(waiting, lambda s: s.status.finished)
        assert snap.status is RunStatus.CANCELLED
        # The run's end purged its timers (the pending wait and its timeout): a work queue kept
        # them until they came due, to fire into a finished run. The sentinel stays.
        await wait_state(t, 1)
        assert await t.get_last_msg(layout.TIMER_STREAM, wake) is None
        # The timer loop goes on past the purged timer it held: another run's waits fire.
        run = await stack.service.start_run(short_wf, None)
        done = await stack.wait_run(run, lambda s: s.status.finished)
        assert done.status is RunStatus.COMPLETED
        assert engine.stats.malformed == 0
        assert engine.stats.timers_fired == WAITS
        assert await timers_fired(t, waiting) == []


async def test_a_store_whose_timer_stream_is_a_work_queue_keeps_it_and_runs(
    fresh_nats_server: NatsServer,
) -> None:
    async with store(fresh_nats_server, old=True) as t, open_stack(t) as stack:
        await provision(t)  # a second start provisions again
        assert retention(await t.stream_info(layout.TIMER_STREAM)) == "workqueue"
        gate = trio.Event()
        run = await run_through_waits(t, stack, gate)
        # Each fired timer's ack removed it (a tombstone each); the timeouts stay pending.
        mid = await wait_state(t, 1 + DISPATCHES)  # the sentinel too, stored when provisioned
        assert mid.last_seq == 1 + WAITS + DISPATCHES
        assert [e.kind for e in await timers_fired(t, run)] == ["wait"] * WAITS
        gate.set()
        snap = await stack.wait_run(run, lambda s: s.status.finished)
        assert snap.status is RunStatus.COMPLETED
        assert snap.output == {"iterations": WAITS}
        # The run's end purge removes the pending timeouts here too (one purge).
        after = await wait_state(t, 1)
        assert after.last_seq == mid.last_seq
        stored = mid.last_seq - 1
        print(
            f"\nSLEEP_TIMERS on a work queue, the same run: stored {stored}, removed by "
            f"acks {mid.last_seq - mid.messages}, one purge at the end: "
            f"{stored + (mid.last_seq - mid.messages) + 1} fsynced writes"
        )


async def test_a_timer_due_now_fires_past_a_thousand_pending_far_ones(
    fresh_nats_server: NatsServer,
) -> None:
    """A thousand timers an hour ahead (a thousand runs each with a step timeout of an hour) are
    all pending on the timer consumer, nakked until due. Under the server's default
    ``max_ack_pending`` (1000) the consumer then delivers nothing new, and a timer due now would
    wait an hour; the engines' consumer has no limit, so it fires at once. A consumer an earlier
    engine made (with the default) gets the new limit when an engine starts."""
    async with store(fresh_nats_server, old=False) as t, open_stack(t) as stack:
        engine = new_engine(t, stack.inputs)
        as_before = attrs.evolve(
            engine_timer_consumer(engine.timer_ack_wait_s), max_ack_pending=DEFAULT_MAX_ACK_PENDING
        )
        await t.ensure_consumer(as_before)
        assert (await timer_consumer(t))["config"]["max_ack_pending"] == DEFAULT_MAX_ACK_PENDING
        await stack.start(engine)
        assert (await timer_consumer(t))["config"]["max_ack_pending"] == -1
        far_due_ms = engine.env.wall_ms() + FAR_TIMER_DELAY_MS

        async def arm_far(first: int) -> None:
            for i in range(first, FAR_TIMERS, ARM_CONCURRENCY):
                run = f"far-{i}"
                event = TimerFired(run, "s", TIMER_TIMEOUT)
                await arm_timer(t, ArmTimer(f"{run}-timeout", far_due_ms, event))

        async with trio.open_nursery() as nursery:
            for first in range(ARM_CONCURRENCY):
                nursery.start_soon(arm_far, first)
        # The timer loop took every far timer and holds it, nakked until due.
        await wait_delivered(t, FAR_TIMERS, ack_pending=FAR_TIMERS)
        near = uid("near")
        armed_at = trio.current_time()
        near_timer = TimerFired(near, "s", TIMER_TIMEOUT)
        await arm_timer(t, ArmTimer(f"{near}-timeout", engine.env.wall_ms(), near_timer))
        with trio.move_on_after(WAIT_S):
            await engine.wait_stats(lambda s: s.timers_fired >= 1)
        waited_s = trio.current_time() - armed_at
        assert engine.stats.timers_fired == 1, (
            f"a due timer did not fire within {WAIT_S} s behind {FAR_TIMERS} pending ones"
        )
        assert await timers_fired(t, near) == [near_timer]
        # The due one was acked; the far ones are all still pending, none fired.
        await wait_delivered(t, FAR_TIMERS + 1, ack_pending=FAR_TIMERS)
        print(
            f"\ntimer due now, behind {FAR_TIMERS} pending timers an hour ahead: "
            f"fired {waited_s:.3f} s after it was armed"
        )
