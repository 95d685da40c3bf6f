"""Scale-out, bounded (issue 12, item 6): the ``just bench scale --kill-node`` measurement at
40 runs, 2 ``dagnats serve`` engine processes and 2 ``dagnats worker`` processes on a 3-node
cluster, the journal stream's leader SIGKILLed once the first run has finished and restarted
on its store: every run completes with the script's answer, no unsafe tool starts twice
(counted by the tool itself outside the journal), and every run's ``journal check`` passes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio

from bench.__main__ import ON_DEMAND, SECTIONS, main
from bench.scale import MARKER_SUFFIX, _Finished, measure, unsafe_starts
from dagnats_trio.api import Service
from dagnats_trio.engine import encode_snapshot
from dagnats_trio.protocol import RunStatus, layout
from dagnats_trio.transport import KvEntry, Transport, TransportError, provision

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


#: Bound on seeing a run finished once the watch is back (it reopens after 0.5 s).
SEEN_AFTER_REOPEN_S: Final = 10.0


class _DroppedWatch:
    """A transport whose first KV watch sees nothing and then ends with a TransportError, as a
    watch ends when its node is killed; later watches are the transport's own."""

    def __init__(self, tp: Transport) -> None:
        self.tp = tp
        self.drop = trio.Event()
        self.opened = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tp, name)

    @asynccontextmanager
    async def kv_watch(
        self, bucket: str, prefix: str = ""
    ) -> AsyncIterator[AsyncIterator[KvEntry]]:
        self.opened += 1
        if self.opened > 1:
            async with self.tp.kv_watch(bucket, prefix) as changes:
                yield changes
            return

        async def down() -> AsyncIterator[KvEntry]:
            await self.drop.wait()
            raise TransportError("the watch's node was killed")
            yield  # an async generator that yields nothing

        yield down()


async def test_a_run_finished_while_the_watch_was_down_is_seen_when_it_reopens(
    trio_transport: Transport,
) -> None:
    # The scale test once took 134 s of its 120 s deadline: a run that finished while the
    # node kill had the watch down was never seen, so the measurement waited out its deadline.
    await provision(trio_transport)
    service = Service(trio_transport)
    run_id = await service.start_run(await _workflow(service))
    finished = _Finished(expected=1, mark=0)
    finished.started[run_id] = 0.0
    watched = _DroppedWatch(trio_transport)
    async with trio.open_nursery() as nursery:
        await nursery.start(finished.watch, watched)
        entry = await trio_transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id))
        assert entry is not None and entry.value is not None
        done = attrs.evolve(await service.get_run(run_id), status=RunStatus.COMPLETED)
        await trio_transport.kv_update(
            layout.RUNS_BUCKET, layout.run_key(run_id), encode_snapshot(done), entry.revision
        )
        assert not finished.all_done.is_set()  # saved while the watch was down: not seen
        watched.drop.set()
        with trio.fail_after(SEEN_AFTER_REOPEN_S):
            await finished.all_done.wait()
        nursery.cancel_scope.cancel()
    assert finished.reopened == 1 and watched.opened == 2
    assert list(finished.at) == [run_id]
    assert finished.snaps[run_id].status is RunStatus.COMPLETED


async def _workflow(service: Service) -> str:
    name = f"scale-watch-{trio.current_time():.0f}-{id(service)}"
    await service.register_workflow({"name": name, "steps": [{"id": "a", "task": name}]})
    return name
