"""Scale-out, bounded (issue 12, item 6): the ``just bench scale --kill-node`` measurement at
40 runs, 2 ``dagnats serve`` engine processes and 2 ``dagnats worker`` processes on a 3-node
cluster, the journal stream's leader SIGKILLed once the first run has finished and restarted
on its store: every run completes with the script's answer, no unsafe tool starts twice
(counted by the tool itself outside the journal), and every run's ``journal check`` passes."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from bench.__main__ import ON_DEMAND, SECTIONS, main
from bench.scale import MARKER_SUFFIX, measure, unsafe_starts

RUNS: Final = 40
ENGINES: Final = 2
WORKERS: Final = 2
#: Bound on the runs (from the first start to the last end) on a loaded 2-core machine.
RUNS_DEADLINE_S: Final = 120.0


@pytest.mark.slow
async def test_40_runs_on_2_engines_and_2_worker_processes_survive_a_node_kill() -> None:
    result = await measure(
        runs=RUNS,
        engines=ENGINES,
        workers=WORKERS,
        kill_node=True,
        kill_after_finished=1,
        deadline_s=RUNS_DEADLINE_S,
    )
    print(
        f"runs {result.runs} ok {result.ok} lost {len(result.lost)} duplicated "
        f"{len(result.duplicated)} unsafe starts {result.unsafe_starts} check failures "
        f"{len(result.check_failures)}; {result.wall_s:.1f} s, fault (node, led, at, back) "
        f"{result.fault}"
    )
    assert result.runs == RUNS
    assert result.killed_leader, result.fault
    assert result.fault_at[0] < RUNS, result.fault  # killed mid-run
    assert result.lost == ()
    assert result.not_ok == ()
    assert result.ok == RUNS
    assert result.duplicated == ()
    assert result.unsafe_starts == RUNS  # one unsafe tool per run, started once
    assert result.check_failures == ()


def test_an_unsafe_start_marked_twice_is_counted_as_duplicated(tmp_path: Path) -> None:
    (tmp_path / f"1{MARKER_SUFFIX}").write_text("r1 send_message\nr2 send_message\n")
    (tmp_path / f"2{MARKER_SUFFIX}").write_text("r1 send_message\n")
    (tmp_path / "other.log").write_text("r2 send_message\n")
    starts = unsafe_starts(tmp_path)
    assert starts == {"r1 send_message": 2, "r2 send_message": 1}


def test_scale_runs_only_when_named_and_its_options_are_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "scale" in ON_DEMAND and "scale" not in SECTIONS  # minutes: not in a bare `just bench`
    assert main(["agent", "--kill-node"]) == 2
    assert "no section of ['agent'] takes --kill-node" in capsys.readouterr().err
    assert main(["scale", "--runs=many"]) == 2
    assert "--runs takes a positive whole number, got 'many'" in capsys.readouterr().err
    assert main(["scale", "--runs=0"]) == 2
