"""A whole stack for end-to-end tests: engine and workers wired to one inputs service, runs
started through the API service, and bounded waits on KV watches (never a sleep)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from dagnats_trio.api import Service
from dagnats_trio.engine import Engine, RunSnapshot, StepStatus, decode_snapshot
from dagnats_trio.inputs import InputsService, Submission, SubmissionStatus
from dagnats_trio.journal import CheckReport, check, read_journal
from dagnats_trio.protocol import InputPlacedRecord, JournalRecord, layout
from dagnats_trio.transport import Transport
from dagnats_trio.worker import Handler, Worker

#: Bound on every wait of these tests.
WAIT_S: Final = 15.0
#: Workers' AckWait: short, so a killed holder's task comes back quickly.
ACK_WAIT_S: Final = 1.0
#: Engines' AckWait on the history consumer.
ENGINE_ACK_WAIT_S: Final = 2.0
#: One ``get`` with wait asks for at most this long before asking again.
GET_WAIT_S: Final = 5.0


def uid(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def new_engine(transport: Transport, inputs: InputsService) -> Engine:
    return Engine(transport, inputs=inputs, legacy_step_events=False, ack_wait_s=ENGINE_ACK_WAIT_S)


def new_worker(
    transport: Transport, inputs: InputsService, handlers: Mapping[str, Handler], **kw: Any
) -> Worker:
    kw.setdefault("ack_wait_s", ACK_WAIT_S)
    return Worker(transport, handlers, inputs=inputs, **kw)


@attrs.define
class Part:
    """Something running in its own nursery, so a test can stop it alone (a crash or restart)."""

    scope: trio.CancelScope
    done: trio.Event

    def stop(self) -> None:
        self.scope.cancel()


@attrs.define
class Stack:
    transport: Transport
    nursery: trio.Nursery
    service: Service
    inputs: InputsService

    async def start(self, part: Any) -> Part:
        """Start ``part.run`` in a nursery of its own; :meth:`Part.stop` ends it."""
        scope = trio.CancelScope()
        done = trio.Event()

        async def host(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    async with trio.open_nursery() as inner:
                        await inner.start(part.run)
                        task_status.started()
            finally:
                done.set()

        await self.nursery.start(host)
        return Part(scope, done)

    async def workflow(self, definition: dict[str, Any]) -> str:
        await self.service.register_workflow(definition)
        return str(definition["name"])

    async def wait_run(self, run_id: str, ok: Callable[[RunSnapshot], bool]) -> RunSnapshot:
        """The run's snapshot once ``ok`` holds (watch first, then read: nothing is missed)."""
        key = layout.run_key(run_id)
        with trio.fail_after(WAIT_S):
            async with self.transport.kv_watch(layout.RUNS_BUCKET, key) as changes:
                snap = await self.service.get_run(run_id)
                if ok(snap):
                    return snap
                async for entry in changes:
                    if entry.key == key and entry.value is not None:
                        snap = decode_snapshot(entry.value)
                        if ok(snap):
                            return snap
        raise AssertionError("unreachable")

    async def wait_waiting(self, run_id: str, step_id: str, iterations: int) -> RunSnapshot:
        """Until the step waits after ``iterations`` ended iterations."""

        def ok(s: RunSnapshot) -> bool:
            st = s.steps[step_id]
            return st.status is StepStatus.WAITING and st.iterations == iterations

        return await self.wait_run(run_id, ok)

    async def wait_input(
        self, run_id: str, step_id: str, request_id: str, status: SubmissionStatus
    ) -> Submission:
        with trio.fail_after(WAIT_S):
            while True:
                sub = await self.inputs.get(run_id, step_id, request_id)
                if sub.status is status:
                    return sub
                assert not sub.status.settled, f"{request_id} settled as {sub.status}"
                await self.inputs.get(run_id, step_id, request_id, GET_WAIT_S, since=sub.status)


@asynccontextmanager
async def open_stack(transport: Transport) -> AsyncIterator[Stack]:
    async with trio.open_nursery() as nursery:
        yield Stack(transport, nursery, Service(transport), InputsService(transport))
        nursery.cancel_scope.cancel()


async def journal_audit(
    transport: Transport, snap: RunSnapshot, step_id: str
) -> tuple[CheckReport, list[JournalRecord]]:
    """``journal check`` with the engine's iteration count, and the records it read."""
    entries = await read_journal(transport, snap.run_id, step_id)
    report = check(entries, engine_iterations=snap.steps[step_id].iterations)
    return report, [r for _, r in entries]


def placed_ids(records: list[JournalRecord]) -> list[str]:
    return [r.request_id for r in records if isinstance(r, InputPlacedRecord)]
