"""``dagnats_trio.testing.crash_test`` (issue 15 part 3): a user's handlers under the chaos
soak's kills and stalls on the simulation: clean for a correct agent, the same trace for the same
seed, and each kind of violation caught; the example of docs/testing.md run as a user would."""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from dagnats_trio.journal import Replay, ToolCall
from dagnats_trio.server import NatsServer
from dagnats_trio.testing import (
    CRASH_SEAMS,
    DEFAULT_SCRIPT,
    ScriptedAgent,
    agent_workflow,
    crash_test,
    crash_test_async,
    draw_crash_schedule,
)
from dagnats_trio.transport import open_nats_transport
from dagnats_trio.worker import TaskContext
from tests.docs._blocks import blocks

#: Bound of the documented example's pytest run (wall seconds, a loaded machine).
DOC_EXAMPLE_TIMEOUT_S = 300.0
RUNS = 20
#: Bound of the real-server crash test (wall seconds, a loaded machine).
REAL_SERVER_TIMEOUT_S = 120.0


@pytest.fixture(autouse=True)
def quiet_kills() -> Iterator[None]:
    """Killed engines log their tracebacks; the verdict is in the report."""
    logging.disable(logging.ERROR)
    try:
        yield
    finally:
        logging.disable(logging.NOTSET)


def test_a_correct_agent_is_clean_and_every_seam_is_hit() -> None:
    report = crash_test(
        ScriptedAgent().handlers,
        agent_workflow("crash-agent"),
        seed=11,
        inputs=["deploy"],
        runs=RUNS,
        unsafe_tools={"send_message"},
    )
    print(report.summary())
    assert report.ok, "\n".join(report.violations)
    assert len(report.runs) == RUNS and all(r.status == "completed" for r in report.runs)
    assert report.fired["kill"] >= 8 and report.fired["stall"] >= 8
    plans = draw_crash_schedule(11, RUNS, 4)
    covered = {(f.kind, f.seam) for p in plans[: 2 * len(CRASH_SEAMS)] for f in p.faults[:1]}
    assert len(covered) == 2 * len(CRASH_SEAMS)


def test_the_same_seed_gives_the_same_trace() -> None:
    def once(seed: int) -> tuple[str, tuple[str, ...]]:
        r = crash_test(ScriptedAgent().handlers, agent_workflow("t"), seed=seed, runs=8)
        assert r.ok, "\n".join(r.violations)
        return r.trace_hash, r.trace

    first, again, other = once(5), once(5), once(6)
    print("trace", first[0][:16], "other seed", other[0][:16])
    assert first == again
    assert first[0] != other[0]


def test_an_unsafe_tool_declared_safe_is_caught() -> None:
    """send_message declared safe: a successor runs it again after a crash inside it. (Seed 3:
    one whose schedule crashes inside send_message at its iteration; seed 2 did so until the
    schedule gained the ``inside_batch`` seam.)"""
    unsafe = attrs.evolve(DEFAULT_SCRIPT[1], replay=Replay.SAFE)
    script = (DEFAULT_SCRIPT[0], unsafe, *DEFAULT_SCRIPT[2:])
    report = crash_test(
        ScriptedAgent(script).handlers,
        agent_workflow("broken"),
        seed=3,
        runs=RUNS,
        unsafe_tools={"send_message"},
    )
    print(report.summary())
    print("\n".join(report.violations))
    assert not report.ok
    assert all("unsafe tool 'send_message' started 2 times" in v for v in report.violations)
    assert all("seed 3" in v for v in report.violations)
    # without the truth about the tool, the declared-safe call is not the harness's to count
    blind = crash_test(ScriptedAgent(script).handlers, agent_workflow("b"), seed=3, runs=RUNS)
    assert blind.ok


def test_an_answer_that_depends_on_the_delivery_is_caught() -> None:
    """A handler that answers from outside its journal (the delivery count) differs from the
    crash-free run once a crash makes it a redelivery."""
    agent = ScriptedAgent()

    async def flaky(tc: TaskContext) -> None:
        if tc.num_delivered > 1:
            await tc.journal()
            await tc.complete({"answer": "redelivered"})
            return
        await agent.turn(tc)

    report = crash_test({agent.task: flaky}, agent_workflow("flaky"), seed=3, runs=RUNS)
    print(report.summary())
    assert not report.ok
    assert any("differs from the crash-free run" in v for v in report.violations)


def run_doc_example(tmp_path: Path, doc: str, module: str, test: str) -> list[str]:
    """Write the doc's two blocks (``# <module>.py`` and ``# <test>.py``) as a user would, run
    pytest on the test in a fresh process; its summary lines."""
    found = {b.key[1].split(":")[0]: b.text for b in blocks("python") if b.file == doc}
    (tmp_path / f"{module}.py").write_text(found[f"# {module}.py"])
    (tmp_path / f"{test}.py").write_text(found[f"# {test}.py"])
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", f"{test}.py"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=DOC_EXAMPLE_TIMEOUT_S,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    return [line for line in done.stdout.splitlines() if "runs, faults fired" in line]


def test_the_testing_doc_example_runs_as_a_user_would(tmp_path: Path) -> None:
    summaries = run_doc_example(tmp_path, "docs/testing.md", "my_agent", "test_my_agent")
    assert len(summaries) == 3 and all(": 20 runs, faults fired" in s for s in summaries)
    assert all(": ok; trace=" in s for s in summaries)


def test_the_concepts_doc_group_example_runs(tmp_path: Path) -> None:
    summaries = run_doc_example(
        tmp_path, "docs/concepts.md", "parallel_agent", "test_parallel_agent"
    )
    assert len(summaries) == 2 and all(": 10 runs, faults fired" in s for s in summaries)
    assert all(": ok; trace=" in s for s in summaries)


async def parallel_agent(tc: TaskContext) -> None:
    """Iteration 0: three tool calls at once (safe, unsafe, unsafe); iteration 1: the answer."""
    j = await tc.journal()
    done = await tc.load_checkpoint()
    if done is not None:
        await tc.complete({"answer": done})
        return

    def tool(name: str) -> Any:
        def run(call: ToolCall) -> Any:
            return {"tool": name, "key": call.key}

        return run

    calls = [
        (ToolCall("search", {"q": tc.input}, call_id="c0"), Replay.SAFE, tool("search")),
        (ToolCall("notify", {"to": "ops"}, call_id="c1"), Replay.UNSAFE, tool("notify")),
        (ToolCall("charge", {"cents": 5}, call_id="c2"), Replay.UNSAFE, tool("charge")),
    ]
    results = await j.tools(calls)
    # The answer names the calls, not their outputs: an unsafe member interrupted by a crash
    # is a correct outcome that a crash-free run never has (the model is told, and goes on).
    assert all(
        r.interrupted or r.output["tool"] == c.name
        for r, (c, _, _) in zip(results, calls, strict=True)
    )
    await tc.checkpoint([c.name for c, _, _ in calls])
    await tc.continue_()


def test_a_parallel_group_agent_survives_the_soak() -> None:
    """The cluster-level soak over a group: kills and stalls between the intents, inside members
    and after results, with engines and workers; no unsafe member starts twice."""
    workflow = agent_workflow("parallel-agent")
    results = [
        crash_test(
            {"scripted-agent": parallel_agent},
            workflow,
            seed=seed,
            inputs=["deploy"],
            runs=RUNS,
            iterations=2,
            unsafe_tools={"notify", "charge"},
        )
        for seed in (21, 22)
    ]
    for report in results:
        print(report.summary())
        assert report.ok, "\n".join(report.violations)
        assert report.fired["kill"] >= 8 and report.fired["stall"] >= 8
    # the group's batch of intents is one of the seams: a kill and a stall fired inside it
    fired = [line for r in results for line in r.trace if line.startswith("fault ")]
    inside = {line.split(": ")[-1].split()[0] for line in fired if "inside_batch" in line}
    print("faults fired inside the intents' batch:", sum("inside_batch" in f for f in fired))
    assert inside == {"kill", "stall"}


async def test_the_same_kills_on_a_real_nats_server(fresh_nats_server: NatsServer) -> None:
    """``connect=`` runs the schedule on a real server (wall clock): the first 8 runs get a kill
    at each of the 8 seams; the verdict is clean."""
    url = fresh_nats_server.url
    started = time.monotonic()
    with trio.fail_after(REAL_SERVER_TIMEOUT_S):
        report = await crash_test_async(
            ScriptedAgent().handlers,
            agent_workflow("real-crash"),
            seed=4,
            inputs=["deploy"],
            runs=len(CRASH_SEAMS),
            unsafe_tools={"send_message"},
            connect=functools.partial(open_nats_transport, url, name="crash-test"),
        )
    print(report.summary(), f"wall {time.monotonic() - started:.1f} s")
    assert report.ok, "\n".join(report.violations)
    assert all(r.status == "completed" for r in report.runs)
    assert report.fired["kill"] >= len(CRASH_SEAMS) - 2  # a drawn iteration may not be reached
