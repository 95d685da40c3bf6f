"""The sentinels of the streams a run's end purges, on a real nats-server (issue 12, fsync p50).

A purge that empties a file stream makes nats-server remove the stream's block file, create a
new one and fsync a tombstone into it: a file created and one removed per run's end, on the
disk the next run's writes wait for. Each stream a run's end purges holds a sentinel
(``transport.provision``), so none empties: its block file stays. The sentinel is invisible to
the runtime: no consumer is offered it, ``?status=running`` does not list it (nor log it as a
bad marker), and a store made before gets it, once, when it is provisioned again.

Each run of these tests has one step with a timeout, so its dispatch arms a timeout timer and
its end purges all three streams (its tasks, its active marker, its timers)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio

from dagnats_trio.protocol import RunStatus, layout
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import (
    StreamSpec,
    Transport,
    TransportError,
    TrioNatsTransport,
    open_sim_transport,
    open_trio_nats_transport,
    provision,
)
from dagnats_trio.worker import TaskContext

from ._stack import WAIT_S, Stack, new_engine, new_worker, open_stack, uid

#: Runs one after another: each run's end purges each stream once.
RUNS: Final = 3
#: Pause between two reads of a stream's state.
POLL_S: Final = 0.02
#: The streams a run's end purges, as the version before this one provisioned them (no
#: sentinel subject).
OLD_SPECS: Final = (
    StreamSpec(layout.TASK_STREAM, ("task.*.*",)),
    StreamSpec(layout.TIMER_STREAM, ("sleep.*.*",)),
    StreamSpec(layout.RUN_ACTIVE_STREAM, (layout.RUN_ACTIVE_FILTER,)),
)


@attrs.frozen
class StreamState:
    messages: int
    first_seq: int


async def stream_state(t: TrioNatsTransport, stream: str) -> StreamState:
    s = (await t.stream_info(stream))["state"]
    return StreamState(s["messages"], s["first_seq"])


async def wait_held(t: TrioNatsTransport, stream: str, messages: int) -> StreamState:
    """The stream's state once it holds ``messages`` (the run's end purges off the client's
    path, so its purges may trail the finished snapshot)."""
    with trio.fail_after(WAIT_S):
        while True:
            state = await stream_state(t, stream)
            if state.messages == messages:
                return state
            await trio.sleep(POLL_S)


def block_files(server: NatsServer, stream: str) -> set[str]:
    """The names of the stream's message block files in the server's store (nats-server's file
    store: one ``N.blk`` per block, a new N for each block it creates)."""
    msgs = server.store_dir / "jetstream" / "$G" / "streams" / stream / "msgs"
    assert msgs.is_dir(), f"no message directory for {stream} at {msgs}"
    return {p.name for p in Path(msgs).glob("*.blk")}


async def sentinel_seq(t: Transport, stream: str) -> int:
    msg = await t.get_last_msg(stream, layout.sentinel_subject(stream))
    assert msg is not None, f"{stream} holds no sentinel"
    return msg.seq


async def consumer_pending(t: TrioNatsTransport, stream: str, durable: str) -> int:
    """Messages the durable has not been offered yet."""
    info: dict[str, Any] = json.loads(
        await t.request(f"$JS.API.CONSUMER.INFO.{stream}.{durable}", b"")
    )
    return int(info["num_pending"])


async def timed_step(stack: Stack, task: str) -> str:
    """A one-step workflow whose step has a timeout: its dispatch arms a timer."""
    return await stack.workflow(
        {"name": uid("wf"), "steps": [{"id": "a", "task": task, "timeout": "1h"}]}
    )


async def echo(tc: TaskContext) -> None:
    await tc.complete({"seen": tc.input})


async def test_a_run_end_purge_leaves_each_stream_its_sentinel_and_its_block_file(
    fresh_nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    task = uid("ts")
    async with (
        open_trio_nats_transport(fresh_nats_server.url, name="sentinel") as t,
    ):
        await provision(t)
        kept = {s: await sentinel_seq(t, s) for s in layout.SENTINEL_STREAMS}
        blocks = {s: block_files(fresh_nats_server, s) for s in layout.SENTINEL_STREAMS}
        async with open_stack(t) as stack:
            wf = await timed_step(stack, task)
            await stack.start(new_engine(t, stack.inputs))
            await stack.start(new_worker(t, stack.inputs, {task: echo}))
            stored = {s: (await t.stream_info(s))["state"]["last_seq"] for s in kept}
            for n in range(RUNS):
                run = await stack.service.start_run(wf, n)
                snap = await stack.wait_run(run, lambda s: s.status.finished)
                assert snap.status is RunStatus.COMPLETED
                assert snap.output == {"seen": n}
                assert snap.timers_armed
                # The run's end purged its task, its marker and its timer: each stream holds
                # its sentinel only, at the sequence it was stored at, in the same block file
                # (main: the stream emptied, first_seq past the last, a new block file).
                for stream, seq in kept.items():
                    assert await wait_held(t, stream, 1) == StreamState(1, seq)
                    assert block_files(fresh_nats_server, stream) == blocks[stream]
            # Each run stored one message in each stream (task, marker, timer) and removed it.
            written = {s: (await t.stream_info(s))["state"]["last_seq"] - stored[s] for s in kept}
            assert written == dict.fromkeys(kept, RUNS)
            # Nothing offered the sentinels: no consumer has a message left to deliver.
            assert await consumer_pending(t, layout.TASK_STREAM, layout.worker_durable(task)) == 0
            assert await consumer_pending(t, layout.TIMER_STREAM, layout.TIMER_DURABLE) == 0
            # Listing the running runs skips the active stream's sentinel, silently.
            with caplog.at_level(logging.WARNING):
                page = await stack.service.list_runs(status=RunStatus.RUNNING)
            assert page.runs == ()
            assert [r.message for r in caplog.records if r.levelno >= logging.WARNING] == []
            print(
                f"\n{RUNS} runs, each purged from {', '.join(kept)} at its end: each stream kept "
                f"its sentinel and its block files {sorted(set().union(*blocks.values()))}"
            )


async def test_a_running_run_is_listed_beside_the_active_sentinel(
    fresh_nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    task = uid("idle")  # no worker serves it: the run stays running
    async with (
        open_trio_nats_transport(fresh_nats_server.url, name="sentinel") as t,
        open_stack(t) as stack,
    ):
        await provision(t)
        wf = await timed_step(stack, task)
        await stack.start(new_engine(t, stack.inputs))
        run = await stack.service.start_run(wf, None)
        await stack.wait_run(run, lambda s: s.status is RunStatus.RUNNING)
        with caplog.at_level(logging.WARNING):
            page = await stack.service.list_runs(status=RunStatus.RUNNING)
        assert [r.run_id for r in page.runs] == [run]
        assert page.next_cursor is None
        assert [r.message for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.fixture(params=["nats", "sim"])
def old_store(request: pytest.FixtureRequest) -> NatsServer | None:
    """A fresh store, never provisioned: a real nats-server, or (None) a new simulation."""
    if request.param == "sim":
        return None
    server: NatsServer = request.getfixturevalue("fresh_nats_server")
    return server


async def test_a_store_made_before_gets_each_sentinel_once_when_provisioned(
    old_store: NatsServer | None,
) -> None:
    if old_store is None:
        async with open_sim_transport() as sim:
            await _provision_an_old_store(sim)
    else:
        async with open_trio_nats_transport(old_store.url, name="sentinel") as t:
            await _provision_an_old_store(t)


async def _provision_an_old_store(t: Transport) -> None:
    for spec in OLD_SPECS:
        await t.ensure_stream(spec)
    task_seq = await t.publish(layout.task_subject("old", "r1"), b"task")
    for stream in layout.SENTINEL_STREAMS:  # not a subject of the old streams
        with pytest.raises(TransportError):
            await t.publish(layout.sentinel_subject(stream), b"")
    # Provisioned by this version, then started again: one sentinel each, stored the first time.
    await provision(t)
    first = {s: await sentinel_seq(t, s) for s in layout.SENTINEL_STREAMS}
    await provision(t)
    for stream, seq in first.items():
        msgs = await t.get_batch(stream, 1, 10)
        sentinels = [m for m in msgs if m.subject == layout.sentinel_subject(stream)]
        assert [m.seq for m in sentinels] == [seq]
        assert sentinels[0].data == b""
    # What the store held before stays.
    assert (await t.get_msg(layout.TASK_STREAM, task_seq)).data == b"task"
    assert first[layout.TASK_STREAM] == task_seq + 1
