"""A run's end, off the engine's history loop (``engine._run_ends``), on a real nats-server and on
SimTransport: while a finished run's removals wait on the server, the engine goes on with other
runs' events; the finished run's last event is counted applied only once its removals are made;
and a cancelled engine still makes the run ends it was handed.

On the code before, the history loop awaited the removals itself: a second run started while
the first run's removals were held never got past its start (the first test times out).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio

from dagnats_trio.api import Service
from dagnats_trio.engine import Engine
from dagnats_trio.protocol import TaskMessage, layout
from dagnats_trio.transport import SubjectPurge, Transport, TransportError

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid, wait_until

#: Removals a run of one plain step ends with: its active marker, its tasks (no timer armed).
REMOVALS_PER_RUN = 2
#: Events of such a run the engine applies: its step's completion (which ends the run). Its
#: start was applied by the service, which dispatched the step (``engine.start_dispatched``):
#: the engine repeats that task (counted replayed) or, once the run ended, drops the start.
EVENTS_PER_RUN = 1


@pytest.fixture(params=["own_trio", "sim"])
def any_transport(request: pytest.FixtureRequest) -> Transport:
    """The native client on a server of the test's own (the tests count the events the engine
    applies: on the session server, events earlier tests left would count too), and
    SimTransport."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value


class HeldPurges:
    """The engine's transport, whose purges (a run end's, all in one call) wait while ``hold``
    is set, until ``release``."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.hold = True
        self.release = trio.Event()
        #: Purges that started waiting (the run ends the engine began).
        self.held = 0
        self.held_changed = trio.Event()

    async def purge_subjects(self, purges: Sequence[SubjectPurge]) -> list[TransportError | None]:
        if self.hold:
            self.held += len(purges)
            self.held_changed.set()
            await self.release.wait()
        return await self._inner.purge_subjects(purges)

    async def wait_held(self, n: int) -> None:
        while self.held < n:
            self.held_changed = trio.Event()
            await self.held_changed.wait()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def _one_step_workflow(service: Service) -> tuple[str, str]:
    wf, task = uid("ends"), uid("t")
    await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task}]})
    await service.get_workflow(wf)  # read: every start dispatches its step (EVENTS_PER_RUN)
    return wf, task


async def _complete(task: TaskMessage) -> Any:
    return await complete_with(task, {"ok": True})


async def _marker(transport: Transport, run_id: str) -> Any:
    return await transport.get_last_msg(layout.RUN_ACTIVE_STREAM, layout.run_active_subject(run_id))


async def test_a_held_run_end_holds_back_no_other_run_and_counts_once_made(
    any_transport: Transport,
) -> None:
    service = Service(any_transport)
    wf, task = await _one_step_workflow(service)
    held = HeldPurges(any_transport)
    engine: Engine = test_engine(held)  # type: ignore[arg-type]  # a Transport by its calls
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(any_transport, task, _complete)):
            applied = engine.stats.applied
            first = await service.start_run(wf)
            assert (await wait_until(service, first, lambda s: s.status.finished)).status.finished
            await held.wait_held(REMOVALS_PER_RUN)  # the first run's end waits on the server
            # The history loop is free: a second run starts, runs and finishes meanwhile.
            second = await service.start_run(wf)
            assert (await wait_until(service, second, lambda s: s.status.finished)).status.finished
            # Neither last event counted (each run's end not made yet), and the second run's
            # end waits behind the first's, unstarted.
            assert engine.stats.applied == applied + 2 * EVENTS_PER_RUN - 2
            assert held.held == REMOVALS_PER_RUN
            assert await _marker(any_transport, first) is not None
            held.release.set()
            await engine.wait_stats(lambda s: s.applied >= applied + 2 * EVENTS_PER_RUN)
            assert held.held == 2 * REMOVALS_PER_RUN
            assert await _marker(any_transport, first) is None
            assert await _marker(any_transport, second) is None
    assert engine.stats.applied == applied + 2 * EVENTS_PER_RUN


async def test_a_cancelled_engine_still_makes_the_run_ends_it_was_handed(
    any_transport: Transport,
) -> None:
    service = Service(any_transport)
    wf, task = await _one_step_workflow(service)
    held = HeldPurges(any_transport)
    engine: Engine = test_engine(held)  # type: ignore[arg-type]  # a Transport by its calls
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(any_transport, task, _complete)):
            runs = [await service.start_run(wf) for _ in range(2)]
            for run in runs:
                await wait_until(service, run, lambda s: s.status.finished)
            await held.wait_held(REMOVALS_PER_RUN)  # the first run's end under way, one queued
            assert all([await _marker(any_transport, run) is not None for run in runs])
            held.hold = False  # what the engine sends from now on goes through
        # The engine was cancelled with its run ends unmade: it made them before it stopped.
        assert [await _marker(any_transport, run) for run in runs] == [None, None]


class FailingPurges(HeldPurges):
    """The engine's transport whose purges of one run's end fail with a bug (not a transport
    error), every purge of the others going through."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self.hold = False
        self.failing_run: str | None = None

    async def purge_subjects(self, purges: Sequence[SubjectPurge]) -> list[TransportError | None]:
        for p in purges:
            if self.failing_run is not None and self.failing_run in p.subject:
                raise RuntimeError(f"a bug in the purge of {p.subject}")
        return await super().purge_subjects(purges)


async def test_a_run_end_that_fails_leaves_the_engine_making_the_next_ones(
    any_transport: Transport, caplog: pytest.LogCaptureFixture
) -> None:
    service = Service(any_transport)
    wf, task = await _one_step_workflow(service)
    failing = FailingPurges(any_transport)
    engine: Engine = test_engine(failing)  # type: ignore[arg-type]  # a Transport by its calls
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(any_transport, task, _complete)):
            applied = engine.stats.applied
            first = await service.start_run(wf)
            failing.failing_run = first
            await wait_until(service, first, lambda s: s.status.finished)
            second = await service.start_run(wf)
            await wait_until(service, second, lambda s: s.status.finished)
            # Both runs' events counted: the failed run end too (logged, not retried).
            await engine.wait_stats(lambda s: s.applied >= applied + 2 * EVENTS_PER_RUN)
            assert await _marker(any_transport, first) is not None  # its removal failed
            assert await _marker(any_transport, second) is None
    assert f"run {first}: its end's removals failed" in caplog.text
