"""Issue 12 goal 3 (CPU per run): the machinery an agent run costs the runtime, counted.

A profiler counts calls into a few Trio primitives (and the crash seams) over scripted agent
runs on the bench's stack (a real nats-server): counts, not times, so a loaded machine barely
moves them. Each test pins one thing that the runtime used to spend per delivery, per fetch or
per record for nothing.
"""

from __future__ import annotations

import cProfile
import json
from collections import Counter
from collections.abc import Callable
from types import CodeType
from typing import Any, Final

import trio

from bench._stack import RUN_TIMEOUT_S, open_stack
from bench.agent import HEADLINE
from dagnats_trio._seams import crash_point, current_hook
from dagnats_trio.journal import DeliveryState
from dagnats_trio.journal._fencing import FencedWriter
from dagnats_trio.nats._mux import RequestMux
from dagnats_trio.protocol import check_json, dumps_json
from dagnats_trio.testing import AGENT_TASK, ScriptedAgent, agent_workflow, expected_answer
from dagnats_trio.transport import TransientRetry, retry_transient
from dagnats_trio.worker._lease import keep_alive

WORKFLOW: Final = "trio-calls-agent"
WARMUP_RUNS: Final = 3
RUNS: Final = 10
#: Cancel scopes entered per scripted agent run (4 deliveries, 5 history events): 19 measured
#: when each delivery ran its nursery inside a scope of its own (4 per run); 15 since the
#: delivery's scope is its nursery's; 7 since a fetch waits without a scope of its own (53f8d77):
#: the deliveries' nurseries (4), the start's index writes (1), the run end's two purges (1),
#: the bench's bound on the run (1); 5 since the index writes and the purges are one call
#: each, sent at once with no task (``Transport.kv_get_and_publish_many``, ``purge_subjects``).
#: A heartbeat's beat (a scope each, ``_HEARTBEAT_LOOP``) is not counted: beats follow the
#: clock, not the runs, and a loaded machine fits more of them into the counted runs (one did:
#: 7.1 per run with 7 bounded). Nor is the request deadline watcher's alarm
#: (``_DEADLINE_WATCHER``, a scope each time it wakes): it wakes when the earliest deadline of
#: a request passes, answered or not, so it too follows the clock (one loaded run of the suite
#: on two xdist workers counted 0.2 per run of it, 5.2 with 5 bounded).
MAX_CANCEL_SCOPES_PER_RUN: Final = 5
#: Calls of ``trio.Semaphore``'s ``acquire_nowait`` and ``release`` per scripted agent run: 128
#: measured when the worker's places for deliveries were a semaphore (a fetch of up to 16 took
#: 16 places one call each and gave back the 15 unfilled one call each); none since they are
#: ``worker._slots.Slots`` (one call to reserve, one to give back, whatever the count).
MAX_SEMAPHORE_CALLS_PER_RUN: Final = 0
#: Crash points reached per scripted agent run with no hook installed (production): 36 measured
#: when every seam built its context and awaited the (empty) hook; none since a seam asks
#: whether a hook is installed first.
MAX_CRASH_POINTS_PER_RUN: Final = 0
#: Calls of ``DeliveryState.seam`` per scripted agent run with no hook ever installed: 29
#: measured when each journal seam called it to ask whether a hook is installed (three calls a
#: seam: the method, ``hook_installed``, the context variable's ``get``); none since the
#: callers read ``current_hook() is not None`` first.
MAX_SEAM_CALLS_PER_RUN: Final = 0
#: ``TransientRetry`` objects made per scripted agent run when nothing fails: one per fenced
#: append while each made its own before publishing; none since one is made at a first failure.
MAX_TRANSIENT_RETRIES_PER_RUN: Final = 0

#: pstats' key of a function: (filename, first line, name).
FuncKey = tuple[str, int, str]


def _key(fn: Callable[..., Any]) -> FuncKey:
    code: CodeType = fn.__code__
    return (code.co_filename, code.co_firstlineno, code.co_name)


def _caller_name(filename: str, name: str) -> str:
    """A caller as :func:`_calls_per_run` names it: its package and module, and its name."""
    module = filename.replace("\\", "/").rsplit("/", 2)[-2:]
    return f"{'/'.join(module)}:{name}"


#: The worker's heartbeat loop, as the profile names a caller (made from the function, so a
#: rename or a move cannot leave a name that matches nothing).
_HEARTBEAT_LOOP: Final = _caller_name(keep_alive.__code__.co_filename, keep_alive.__name__)
#: The native client's request deadline watcher, as the profile names a caller (made the same way).
_DEADLINE_WATCHER: Final = _caller_name(
    RequestMux.run_deadlines.__code__.co_filename, RequestMux.run_deadlines.__name__
)


async def _profiled_runs() -> dict[FuncKey, Any]:
    """cProfile's raw stats over ``RUNS`` scripted agent runs (after a warmup), each checked."""
    agent = ScriptedAgent(paired=HEADLINE.paired)
    async with open_stack(
        sync_always=False,
        handlers={AGENT_TASK: agent.turn},
        workflows=[agent_workflow(WORKFLOW)],
    ) as stack:
        for _ in range(WARMUP_RUNS):
            await stack.run(WORKFLOW, {"task": "deploy"})
        # The count spans exactly the runs' own work: the warm-up's run ends are done before it
        # starts, and the last run's before it stops (the engine's run-end task makes them
        # after the client has seen the run finished). The bound on that wait is entered
        # before the count starts, so it is not one of the scopes counted.
        await stack.wait_settled()
        profiler = cProfile.Profile()
        with trio.fail_after(RUNS * RUN_TIMEOUT_S):
            profiler.enable()
            try:
                answers = [(await stack.run(WORKFLOW, {"task": "deploy"})) for _ in range(RUNS)]
                await stack.settled()
            finally:
                profiler.disable()
    assert all(snap.outputs().get("agent") == expected_answer() for snap in answers)
    profiler.create_stats()
    stats: dict[FuncKey, Any] = profiler.stats  # type: ignore[attr-defined]
    return stats


def _calls_per_run(
    stats: dict[FuncKey, Any], fn: Callable[..., Any], *, excluding: tuple[str, ...] = ()
) -> tuple[float, str]:
    """Calls of ``fn`` per run, leaving out those made by the callers named in ``excluding``
    (module and function), and who made them (per run, by caller's module and name)."""
    entry = stats.get(_key(fn))
    if entry is None:
        return 0.0, ""
    callers: Counter[str] = Counter()
    for (filename, _line, name), figures in entry[4].items():
        callers[_caller_name(filename, name)] += figures[1]
    shown = ", ".join(f"{who}: {n / RUNS:.1f}" for who, n in callers.most_common())
    return (entry[1] - sum(callers[who] for who in excluding)) / RUNS, shown


async def test_an_agent_run_enters_few_cancel_scopes() -> None:
    stats = await _profiled_runs()
    per_run, by = _calls_per_run(
        stats, trio.CancelScope.__enter__, excluding=(_HEARTBEAT_LOOP, _DEADLINE_WATCHER)
    )
    print(f"cancel scopes entered per agent run, beats left out: {per_run:.1f} ({by})")
    assert per_run > 0  # the count saw the runs
    assert per_run <= MAX_CANCEL_SCOPES_PER_RUN


async def test_an_agent_run_takes_its_worker_places_without_a_call_per_place() -> None:
    stats = await _profiled_runs()
    acquires, by_acquire = _calls_per_run(stats, trio.Semaphore.acquire_nowait)
    releases, by_release = _calls_per_run(stats, trio.Semaphore.release)
    print(
        f"Semaphore calls per agent run: acquire_nowait {acquires:.1f} ({by_acquire}), "
        f"release {releases:.1f} ({by_release})"
    )
    assert acquires + releases <= MAX_SEMAPHORE_CALLS_PER_RUN


async def test_an_agent_run_without_a_seam_hook_reaches_no_crash_point() -> None:
    assert current_hook() is None  # production: no hook installed for this context
    stats = await _profiled_runs()
    per_run, by = _calls_per_run(stats, crash_point)
    print(f"crash points reached per agent run without a hook: {per_run:.1f} ({by})")
    assert per_run <= MAX_CRASH_POINTS_PER_RUN
    seams, by_seams = _calls_per_run(stats, DeliveryState.seam)
    print(f"journal seam calls per agent run without a hook: {seams:.1f} ({by_seams})")
    assert seams <= MAX_SEAM_CALLS_PER_RUN
    retries, by_retries = _calls_per_run(stats, TransientRetry.__init__)
    appends, _ = _calls_per_run(stats, FencedWriter._publish)
    retried, _ = _calls_per_run(stats, retry_transient)
    print(f"transient retries made per agent run: {retries:.1f} ({by_retries}); "
          f"fenced appends {appends:.1f}, retried calls {retried:.1f}")  # fmt: skip
    assert appends > 0 and retried > 0  # the count saw the calls that may retry
    assert retries <= MAX_TRANSIENT_RETRIES_PER_RUN


#: Calls of json's per-call wrappers (``json.dumps`` and ``json.loads``, which build an encoder
#: with options or sniff the bytes' encoding on every call, and ``JSONDecoder.decode``, which
#: ``raw_decode`` spares for a text with nothing after its value) made by the codec and the
#: journal per scripted agent run: 23 measured while each decode went through ``decode`` (20)
#: and the canonical spelling of tool inputs through ``json.dumps`` (3); none since both use
#: json's documented calls on encoders and a decoder built once (``JSONEncoder.encode``,
#: ``JSONDecoder.raw_decode``).
MAX_CODEC_JSON_WRAPPER_CALLS_PER_RUN: Final = 0


async def test_an_agent_runs_codec_calls_no_per_call_json_wrapper() -> None:
    stats = await _profiled_runs()
    per_run = 0.0
    for fn in (json.dumps, json.loads, json.JSONDecoder.decode):
        entry = stats.get(_key(fn))
        if entry is not None:
            per_run += sum(
                figures[1]
                for caller, figures in entry[4].items()
                if "dagnats_trio/protocol/" in caller[0].replace("\\", "/")
                or "dagnats_trio/journal/" in caller[0].replace("\\", "/")
            )
    per_run /= RUNS
    encodes, _ = _calls_per_run(stats, dumps_json)
    print(f"json wrapper calls by the codec per agent run: {per_run:.1f} "
          f"({encodes:.1f} dumps_json per run)")  # fmt: skip
    assert encodes > 0  # the count saw the codec at work
    assert per_run <= MAX_CODEC_JSON_WRAPPER_CALLS_PER_RUN


#: Calls of cattrs' tagged-union wrappers and enum lambdas (``cattrs/strategies/_unions.py``,
#: ``cattrs/enums.py``) per scripted agent run: 123 measured while the codec used cattrs' own
#: hooks (35 records, events and effects encoded through two wrappers each, 10 decoded through
#: two, 33 enums through a lambda each); none since the codec's own hooks call the member's
#: hook directly and read or find an enum by its value in C and a dict.
MAX_CATTRS_WRAPPER_CALLS_PER_RUN: Final = 0


async def test_an_agent_runs_codec_calls_no_cattrs_union_or_enum_wrapper() -> None:
    stats = await _profiled_runs()
    calls: Counter[str] = Counter()
    for (filename, _line, name), figures in stats.items():
        if filename.replace("\\", "/").endswith(
            ("cattrs/strategies/_unions.py", "cattrs/enums.py")
        ):
            calls[name] += figures[1]
    shown = ", ".join(f"{name}: {n / RUNS:.1f}" for name, n in calls.most_common())
    print(f"cattrs union and enum wrapper calls per agent run: {sum(calls.values()) / RUNS:.1f} "
          f"({shown})")  # fmt: skip
    encodes, _ = _calls_per_run(stats, dumps_json)
    assert encodes > 0  # the count saw the codec at work
    assert sum(calls.values()) / RUNS <= MAX_CATTRS_WRAPPER_CALLS_PER_RUN


#: ``isinstance`` calls made by the policy's walk (``check_json``, 16 checks per scripted agent
#: run: model responses, states, tool inputs and outputs, the run's input) per run: 107 measured
#: while every container popped and every value checked was tested with ``isinstance``; none
#: since the exact kinds are told apart by ``type(x) is`` (``isinstance`` for subclasses only).
MAX_POLICY_ISINSTANCE_CALLS_PER_RUN: Final = 0


async def test_an_agent_runs_policy_checks_call_no_isinstance() -> None:
    stats = await _profiled_runs()
    checks, by = _calls_per_run(stats, check_json)
    isinstance_calls = 0
    for (_filename, _line, name), figures in stats.items():
        if name == "<built-in method builtins.isinstance>":
            isinstance_calls = sum(
                n[1]
                for caller, n in figures[4].items()
                if caller[0].replace("\\", "/").endswith("dagnats_trio/protocol/json_policy.py")
            )
    per_run = isinstance_calls / RUNS
    print(f"isinstance calls by the policy per agent run: {per_run:.1f} "
          f"({checks:.1f} checks per run: {by})")  # fmt: skip
    assert checks > 0  # the count saw the checks
    assert per_run <= MAX_POLICY_ISINSTANCE_CALLS_PER_RUN
