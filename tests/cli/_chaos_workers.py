"""The agent that ``dagnats worker`` processes run in tests/cli/test_process_signals.py.

Three iterations: a safe tool, an unsafe tool, an answer (journal step, scripted model). Every
start of a tool is one line appended to the file ``$DAGNATS_CHAOS_LOG`` (``start {key} {name}
{pid}``), outside the journal, so the test counts starts whatever the journal says; a process
that is killed keeps what it appended (the kernel has it). The unsafe tool of a run whose input
holds ``"hold": true`` waits until the file ``$DAGNATS_CHAOS_LOG.release`` exists, so the test
can stop its holder inside it. A handler that ends by an exception says so (``end {run} {pid}
{exception}``): a zombie released after its successor finished the run ends there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Final

import trio
import trio.lowlevel

from dagnats_trio.journal import Replay, ToolCall
from dagnats_trio.protocol import JsonValue
from dagnats_trio.worker import Handler, TaskContext

LOG_ENV: Final = "DAGNATS_CHAOS_LOG"
#: How long the unsafe tool works when not held (a window for the signals to land in).
UNSAFE_WORK_S: Final = 0.3
#: Bound of a held tool's wait for its release (the test releases it far sooner).
HOLD_BOUND_S: Final = 120.0
HOLD_POLL_S: Final = 0.05


def _log(line: str) -> None:
    path = os.environ[LOG_ENV]
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _wait_for(path: Path) -> None:
    """Blocks (in a thread) until ``path`` exists, up to :data:`HOLD_BOUND_S`."""
    deadline = time.monotonic() + HOLD_BOUND_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {HOLD_BOUND_S} s")
        time.sleep(HOLD_POLL_S)


def _held(tc: TaskContext) -> bool:
    return isinstance(tc.input, dict) and tc.input.get("hold") is True


async def _search(call: ToolCall) -> JsonValue:
    _log(f"start {call.key} {call.name} {os.getpid()}")
    await trio.lowlevel.checkpoint()
    return {"found": call.input}


async def agent(tc: TaskContext) -> None:
    try:
        await _turn(tc)
    except BaseException as exc:
        _log(f"end {tc.run_id} {os.getpid()} {type(exc).__name__}")
        raise


async def _turn(tc: TaskContext) -> None:
    j = await tc.journal()
    reply = await j.model(lambda: _model(tc.iteration))
    assert isinstance(reply, dict)
    if tc.iteration == 0:
        await j.tool(ToolCall("search", reply["input"]), Replay.SAFE, _search)
        await tc.continue_()
    elif tc.iteration == 1:

        async def send(call: ToolCall) -> JsonValue:
            _log(f"start {call.key} {call.name} {os.getpid()}")
            if _held(tc):
                release = Path(os.environ[LOG_ENV] + ".release")
                await trio.to_thread.run_sync(_wait_for, release, abandon_on_cancel=True)
            else:
                await trio.sleep(UNSAFE_WORK_S)
            return {"sent": call.input}

        result = await j.tool(ToolCall("send", reply["input"]), Replay.UNSAFE, send)
        await tc.checkpoint({"interrupted": result.interrupted})
        await tc.continue_()
    else:
        state = await tc.load_checkpoint()
        await tc.complete({"answer": reply["answer"], "send": state})


async def _model(iteration: int) -> JsonValue:
    await trio.lowlevel.checkpoint()
    if iteration == 0:
        return {"tool": "search", "input": "flights"}
    if iteration == 1:
        return {"tool": "send", "input": {"to": "alice"}}
    return {"answer": "booked"}


handlers: dict[str, Handler] = {"chaos_agent": agent}
