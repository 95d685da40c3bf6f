"""``python -m chaos [--seed N] [--runs N] [--real] [--cluster] [--duration S]`` (``just chaos``).

Prints the seed first, a summary at the end and ``trace=<sha256>``; exits 1 on any violation,
naming the failing run and the seed. On the simulation the same seed gives the same trace (the
soak runs as one Hypothesis example: without Hypothesis it says so in one line and exits 3).
"""

from __future__ import annotations

import argparse
import functools
import logging
import secrets
import sys
import time

import trio

from dagnats_trio._env import DEFAULT_ENV
from dagnats_trio.testing import SchedulingUnavailable

from ._backends import open_real_backend, real_config, run_sim_soak
from ._soak import SETTLE_MAX_S, SoakConfig, SoakResult, soak
from ._watchdog import WallWatchdog

#: Runs by mode when ``--runs`` is not given.
SIM_RUNS_DEFAULT = 50
REAL_RUNS_DEFAULT = 12
CLUSTER_RUNS_DEFAULT = 8
#: ``--duration`` defaults (wall seconds). On the simulation it is a watchdog only (the trace
#: never depends on it); on real servers no run starts after it, and the whole soak, server start
#: and final checks included, must end within it plus the grace below.
SIM_DURATION_DEFAULT_S = 300.0
REAL_DURATION_DEFAULT_S = 60.0
CLUSTER_DURATION_DEFAULT_S = 90.0
#: Without ``--duration``, a longer soak gets at least this much wall time per run: a cluster's
#: node faults run one at a time, each for seconds (``--runs 1000 --cluster`` gets 6,000 s).
SIM_SECONDS_PER_RUN = 0.5
REAL_SECONDS_PER_RUN = 1.0
CLUSTER_SECONDS_PER_RUN = 6.0
REAL_GRACE_S = 90.0
#: On a cluster the grace also covers the node faults still queued when the last run ends.
CLUSTER_GRACE_S = REAL_GRACE_S + SETTLE_MAX_S
#: Seeds drawn when none is given are below this.
SEED_MAX = 2**32
#: Exit codes.
EXIT_OK = 0
EXIT_VIOLATION = 1
EXIT_OVERTIME = 2
EXIT_UNAVAILABLE = 3


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    p.add_argument("--seed", type=int, default=None, help="schedule seed (default: a new one)")
    p.add_argument("--runs", type=int, default=None, help="runs (sim 50, real 12, cluster 8)")
    p.add_argument("--parallel", type=int, default=None, help="runs in flight at once")
    p.add_argument("--real", action="store_true", help="on an embedded nats-server")
    p.add_argument("--cluster", action="store_true", help="on a 3-node cluster (implies --real)")
    p.add_argument("--duration", type=float, default=None, help="time bound in wall seconds")
    p.add_argument("--trace", action="store_true", help="print the trace lines")
    p.add_argument("-v", "--verbose", action="store_true", help="show the runtime's logs")
    ns = p.parse_args(argv)
    if ns.runs is not None and ns.runs < 1:
        p.error("--runs must be at least 1")
    if ns.parallel is not None and ns.parallel < 1:
        p.error("--parallel must be at least 1")
    if ns.duration is not None and ns.duration <= 0:
        p.error("--duration must be positive")
    if ns.seed is not None and ns.seed < 0:
        p.error("--seed must not be negative")
    return ns


def _summary(result: SoakResult, wall_s: float, reproduce: str) -> int:
    finished = sum(1 for o in result.outcomes if o.status != "unfinished")
    ok = sum(1 for o in result.outcomes if not o.problems)
    injected = " ".join(f"{k}={n}" for k, n in result.injected.items())
    fired = " ".join(f"{k}={n}" for k, n in result.fired.items())
    print(
        f"runs: {result.planned} planned, {len(result.outcomes)} started, {finished} finished, "
        f"{ok} ok"
    )
    print(f"faults injected: {injected} (total {sum(result.injected.values())})")
    print(f"faults fired at their seam: {fired}; never reached: {result.unfired}")
    if result.mode == "real" and result.fired.get("step_down"):
        print(
            f"  ({result.fired['step_down']} step-downs were no-ops: a single server has no "
            "other leader; --cluster makes them real)"
        )
    for note in result.notes:
        print(note)
    if result.mode != "sim":
        print(
            f"slowest run: {result.slowest_run_s:.1f} s; worst wait of a harness call for the "
            f"store to answer: {result.worst_wait_s:.1f} s"
        )
    print(f"violations: {len(result.violations)}")
    for v in result.violations:
        print(f"  {v}")
    clock = "simulated" if result.mode == "sim" else "elapsed"
    print(f"time: {clock} {result.elapsed_s:.2f} s, wall {wall_s:.2f} s")
    print(f"trace={result.trace_hash}")
    if result.violations:
        print(f"FAILED (seed {result.seed}); reproduce with: {reproduce}")
        return EXIT_VIOLATION
    return EXIT_OK


def _run_sim(config: SoakConfig, watchdog: WallWatchdog) -> SoakResult:
    """The deterministic soak: autojump clock and deterministic scheduler."""
    with watchdog:
        return run_sim_soak(config)


async def _real(config: SoakConfig, cluster: bool, total_s: float) -> SoakResult:
    with trio.fail_after(total_s):
        async with open_real_backend(cluster=cluster) as backend:
            return await soak(config, backend, DEFAULT_ENV)


def main(argv: list[str] | None = None) -> int:
    ns = _args(argv)
    seed = ns.seed if ns.seed is not None else secrets.randbelow(SEED_MAX)
    real = ns.real or ns.cluster
    mode = "cluster" if ns.cluster else "real" if real else "sim"
    print(f"seed={seed}", flush=True)
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("dagnats_trio").setLevel(logging.DEBUG if ns.verbose else logging.CRITICAL)
    logging.getLogger("chaos").setLevel(logging.DEBUG if ns.verbose else logging.WARNING)
    runs_default = {"sim": SIM_RUNS_DEFAULT, "real": REAL_RUNS_DEFAULT}.get(
        mode, CLUSTER_RUNS_DEFAULT
    )
    duration_default = {"sim": SIM_DURATION_DEFAULT_S, "real": REAL_DURATION_DEFAULT_S}.get(
        mode, CLUSTER_DURATION_DEFAULT_S
    )
    runs = ns.runs if ns.runs is not None else runs_default
    per_run = {"sim": SIM_SECONDS_PER_RUN, "real": REAL_SECONDS_PER_RUN}.get(
        mode, CLUSTER_SECONDS_PER_RUN
    )
    duration = ns.duration if ns.duration is not None else max(duration_default, runs * per_run)
    grace = CLUSTER_GRACE_S if ns.cluster else REAL_GRACE_S
    base = SoakConfig(seed=seed, runs=runs)
    if real:
        config = real_config(seed, runs, parallel=ns.parallel, budget_s=duration)
    else:
        config = SoakConfig(seed=seed, runs=runs, parallel_runs=ns.parallel or base.parallel_runs)
    print(
        f"mode={mode} runs={config.runs} engines={config.engines} workers={config.workers} "
        f"parallel={config.parallel_runs} ack_wait={config.worker_ack_wait_s}s",
        flush=True,
    )
    reproduce = f"python -m chaos --seed {seed} --runs {runs}" + (
        " --cluster" if ns.cluster else " --real" if real else ""
    )
    started = time.perf_counter()
    watchdog = WallWatchdog(duration)
    try:
        if real:
            result = trio.run(functools.partial(_real, config, ns.cluster, duration + grace))
        else:
            result = _run_sim(config, watchdog)
    except SchedulingUnavailable as exc:
        print(f"python -m chaos: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except BaseException as exc:
        overtime = isinstance(exc, trio.TooSlowError) or (
            watchdog.fired and isinstance(exc, KeyboardInterrupt | BaseExceptionGroup)
        )
        if not overtime:
            raise
        wall = time.perf_counter() - started
        print(f"the soak did not end within its bound ({wall:.1f} s wall); seed {seed}")
        return EXIT_OVERTIME
    wall = time.perf_counter() - started
    if ns.trace:
        for line in result.trace:
            print(f"  | {line}")
    return _summary(result, wall, reproduce)


if __name__ == "__main__":
    sys.exit(main())
