"""The chaos soak in the normal suite: small, on the simulation (deterministic) and once on a
real nats-server of the test's own.

The simulated soaks run through ``run_sim_soak`` (their own ``trio.run`` on an autojumping
``MockClock``, as one Hypothesis example that fixes Trio's scheduling), exactly as
``python -m chaos`` runs them, so the trace hash can be compared between soaks.
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from chaos import (
    BASE_KINDS,
    FALLBACK_SEED,
    SEED_ENV,
    Fault,
    FaultKind,
    RunPlan,
    SoakConfig,
    Target,
    WallWatchdog,
    draw_schedule,
    real_backend,
    run_sim_soak,
    soak,
    soak_seed,
)
from chaos.__main__ import EXIT_UNAVAILABLE
from chaos.__main__ import main as chaos_main
from dagnats_trio._env import DEFAULT_ENV
from dagnats_trio._seams import Seam
from dagnats_trio.journal import Replay
from dagnats_trio.server import NatsServer
from dagnats_trio.testing import Turn

SEEDS = (20240611, 7)
#: Enough runs that every fault kind is scheduled twice (the coverage rounds).
RUNS = 12
#: Bound on the real-server soak (wall seconds).
REAL_SOAK_TIMEOUT_S = 60.0
#: The soak every ``just test`` runs, on the seed of the commit (``chaos/_seed.py``).
SUITE_SOAK_RUNS = 2000
#: Wall bound of that soak, a hang detector (the soak is on the autojump clock): the rest of its
#: CPU time is room for a machine whose cores are busy with other work, such as the suite's
#: other xdist worker and other suites on the same cores (half this bound was once too close).
SUITE_SOAK_WALL_S = 600.0
REPO = Path(__file__).resolve().parents[2]


def test_sim_soak_is_clean_injects_every_kind_and_is_reproducible() -> None:
    first = {seed: run_sim_soak(SoakConfig(seed=seed, runs=RUNS)) for seed in SEEDS}
    for seed, result in first.items():
        assert result.ok, "\n".join(result.violations)
        assert len(result.outcomes) == RUNS
        assert all(o.status == "completed" and not o.problems for o in result.outcomes)
        assert all(dict(o.tool_starts)["send_message"] <= 1 for o in result.outcomes)
        for kind in BASE_KINDS:
            assert result.injected[kind.value] > 0, (seed, kind, result.injected)
        assert len(result.trace_hash) == 64
    again = run_sim_soak(SoakConfig(seed=SEEDS[0], runs=RUNS))
    assert again.trace_hash == first[SEEDS[0]].trace_hash
    assert again.trace == first[SEEDS[0]].trace
    assert first[SEEDS[0]].trace_hash != first[SEEDS[1]].trace_hash


def _pinned(*faults: Fault) -> tuple[RunPlan, ...]:
    return (RunPlan(0, "pinned-00000", faults),)


#: The holder stalls inside the unsafe tool, after its effect and before its result is recorded,
#: past its AckWait: its successor must record "interrupted" instead of starting the tool again.
STALL_INSIDE_UNSAFE_TOOL = Fault(FaultKind.STALL, Seam.INSIDE_TOOL, 1, stall_ack_waits=2.0)


def test_stall_inside_the_unsafe_tool_starts_it_once() -> None:
    result = run_sim_soak(SoakConfig(seed=1, schedule=_pinned(STALL_INSIDE_UNSAFE_TOOL)))
    assert result.ok, "\n".join(result.violations)
    assert result.fired["stall"] == 1
    (outcome,) = result.outcomes
    assert dict(outcome.tool_starts)["send_message"] == 1


def test_soak_catches_an_unsafe_tool_declared_safe() -> None:
    """Break a guard on purpose: with send_message declared safe, the successor runs it again,
    and the zombie starts it once more when it wakes. The soak must say so and fail."""
    script = (
        Turn(tool="search", replay=Replay.SAFE, input={"q": "who is on call"}),
        Turn(tool="send_message", replay=Replay.SAFE, input={"to": "ops", "text": "deploying"}),
        Turn(tool="lookup", replay=Replay.SAFE, input={"id": "deploy-42"}),
        Turn(answer="deployed; ops notified"),
    )
    config = SoakConfig(seed=1, script=script, schedule=_pinned(STALL_INSIDE_UNSAFE_TOOL))
    result = run_sim_soak(config)
    assert not result.ok
    assert any("send_message started 2 times" in v for v in result.violations), result.violations
    assert any("seed 1" in v and "run 0" in v for v in result.violations)


def test_schedule_is_a_function_of_the_seed() -> None:
    a, b = draw_schedule(5, 30), draw_schedule(5, 30)
    assert a == b and a != draw_schedule(6, 30)
    assert len({p.run_id for p in a}) == 30
    first_kinds = {p.faults[0].kind for p in a[: len(BASE_KINDS)]}
    assert first_kinds == set(BASE_KINDS)
    for plan in a:
        for fault in plan.faults:
            assert 0 <= fault.iteration <= 3
            if fault.kind in (FaultKind.KILL, FaultKind.STALL):
                assert fault.target is None
            else:
                assert (
                    fault.target is not None and fault.seam is not Seam.ENGINE_AFTER_DISPATCH_SAVED
                )
    with pytest.raises(ValueError, match="at least one run"):
        draw_schedule(1, 0)


async def test_soak_on_a_real_server(fresh_nats_server: NatsServer) -> None:
    schedule = (
        RunPlan(0, "real-00000", (Fault(FaultKind.KILL, Seam.AFTER_CLAIM, 1),)),
        RunPlan(
            1,
            "real-00001",
            (Fault(FaultKind.STALL, Seam.AFTER_TOOL_INTENT, 1, stall_ack_waits=1.5),),
        ),
        RunPlan(
            2,
            "real-00002",
            (
                Fault(FaultKind.DUPLICATE, Seam.AFTER_COMMIT, 0, target=Target.TASKS),
                Fault(FaultKind.LOST_ACK, Seam.AFTER_CLAIM, 2, target=Target.JOURNAL),
                Fault(FaultKind.DROP, Seam.AFTER_COMMIT, 2, target=Target.TASKS),
            ),
        ),
        RunPlan(3, "real-00003", ()),
    )
    config = SoakConfig(
        seed=3,
        schedule=schedule,
        worker_ack_wait_s=1.0,
        engine_ack_wait_s=1.0,
        run_deadline_s=30.0,
    )
    with trio.fail_after(REAL_SOAK_TIMEOUT_S):
        result = await soak(config, real_backend([fresh_nats_server.url]), DEFAULT_ENV)
    assert result.ok, "\n".join(result.violations)
    assert [o.status for o in result.outcomes] == ["completed"] * 4
    assert result.fired["kill"] == 1 and result.fired["stall"] == 1
    for kind in ("duplicate", "lost_ack", "drop"):
        assert result.injected[kind] == 1, result.injected
    assert all(dict(o.tool_starts)["send_message"] == 1 for o in result.outcomes)


def test_suite_soak_of_2000_runs_on_the_commit_seed(
    record_soak_summary: Callable[[str], None], caplog: pytest.LogCaptureFixture
) -> None:
    """At least 2,000 runs on the autojump clock, seeded by the commit: each commit soaks a new
    schedule. The seed and the replay command are printed at the end of the session."""
    chosen = soak_seed(REPO)
    replay = f"just chaos --seed {chosen.seed} --runs {SUITE_SOAK_RUNS}"
    print(f"seed={chosen.seed} ({chosen.source}); replay with: {replay}")
    # As ``python -m chaos`` does: the injected faults make the runtime log thousands of
    # expected warnings, which would only cost time here.
    caplog.set_level(logging.CRITICAL, logger="dagnats_trio")
    caplog.set_level(logging.CRITICAL, logger="chaos")
    started = time.perf_counter()
    with WallWatchdog(SUITE_SOAK_WALL_S) as watchdog:
        try:
            result = run_sim_soak(SoakConfig(seed=chosen.seed, runs=SUITE_SOAK_RUNS))
        except BaseException:
            if watchdog.fired:
                pytest.fail(
                    f"the soak did not end within {SUITE_SOAK_WALL_S} s of wall time "
                    f"(seed {chosen.seed}); replay with: {replay}"
                )
            raise
    wall_s = time.perf_counter() - started
    ok = sum(1 for o in result.outcomes if o.status == "completed" and not o.problems)
    summary = (
        f"seed={chosen.seed} ({chosen.source}): {SUITE_SOAK_RUNS} runs, {ok} ok, "
        f"{len(result.violations)} violations, {sum(result.injected.values())} faults, "
        f"simulated {result.elapsed_s:.0f} s, wall {wall_s:.1f} s, trace={result.trace_hash[:16]}; "
        f"replay with: {replay}"
    )
    record_soak_summary(summary)
    violations = "\n".join(result.violations[:20])
    assert result.ok, f"{summary}\n{violations}"
    assert len(result.outcomes) == SUITE_SOAK_RUNS and ok == SUITE_SOAK_RUNS, summary
    assert all(dict(o.tool_starts)["send_message"] <= 1 for o in result.outcomes), summary
    for kind in BASE_KINDS:
        assert result.injected[kind.value] > 0, (kind, summary)


def test_the_sim_soak_without_deterministic_scheduling_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HYPOTHESIS_NO_PLUGINS", "1")  # Trio's plugin off: no determinism
    loggers = [logging.getLogger(name) for name in ("dagnats_trio", "chaos")]
    levels = [logger.level for logger in loggers]
    try:
        assert chaos_main(["--seed", "1", "--runs", "1"]) == EXIT_UNAVAILABLE
    finally:  # main sets them, as a CLI does; the rest of the session keeps its own
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    out, err = capsys.readouterr()
    assert out.startswith("seed=1\n") and "trace=" not in out
    assert err.count("\n") == 1 and "unset HYPOTHESIS_NO_PLUGINS" in err, err


def test_soak_seed_comes_from_the_variable_the_commit_or_the_fallback(tmp_path: Path) -> None:
    assert soak_seed(REPO, {SEED_ENV: "42"}).seed == 42
    with pytest.raises(ValueError, match=SEED_ENV):
        soak_seed(REPO, {SEED_ENV: "-1"})
    with pytest.raises(ValueError, match=SEED_ENV):
        soak_seed(REPO, {SEED_ENV: "²"})
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    from_commit = soak_seed(REPO, {})
    assert from_commit.seed == int(head[:8], 16)
    assert from_commit.source == f"commit {head[:8]}"
    assert soak_seed(tmp_path, {}).seed == FALLBACK_SEED  # not a git work tree
