"""The client side of an embedded runtime: start runs and hold handles to them.

A :class:`RunHandle` is the one object a service keeps per run: ``await handle.result()`` (woken
by the runtime's one shared watch, :class:`RunWatch`), ``cancel()``, the inputs of a step
(send, get, withdraw), and ``async for entry in handle.journal(step_id)``. The handle holds no
resources of its own, so keeping thousands costs nothing and dropping one needs no cleanup.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, final

import attrs
import trio

from .._env import RuntimeEnv
from ..api import RunNotFound, Service
from ..api.service import WAIT_FOR_RUN_MAX_S, InvalidRequest, RunPage
from ..dag import WorkflowDef
from ..engine import RunSnapshot
from ..inputs import InputsService, Mode, Submission
from ..protocol import (
    JournalRecord,
    JsonValue,
    RunStatus,
    check_id,
    decode_records,
    layout,
)
from ..transport import Transport
from ._watch import RunWatch

#: How long ``result()`` waits unless told otherwise.
DEFAULT_RESULT_TIMEOUT_S = 300.0
#: Records read per request while following a journal.
JOURNAL_READ_BATCH_RECORDS = 100
#: Longest ``journal(follow=True)`` goes without looking for new records.
JOURNAL_POLL_INTERVAL_S = 0.25

__all__ = [
    "DEFAULT_RESULT_TIMEOUT_S",
    "Client",
    "JournalEntry",
    "RunFailed",
    "RunHandle",
]


@final
class RunFailed(Exception):
    """``result()`` of a run that failed or was cancelled; ``snapshot`` says why."""

    def __init__(self, snapshot: RunSnapshot) -> None:
        self.snapshot = snapshot
        where = f" at step {snapshot.failed_step!r}" if snapshot.failed_step else ""
        reason = f": {snapshot.error}" if snapshot.error else ""
        super().__init__(f"run {snapshot.run_id!r} {snapshot.status.value}{where}{reason}")


@final
@attrs.frozen
class JournalEntry:
    """One record of a step's journal and its sequence in the journal stream."""

    seq: int
    record: JournalRecord


@final
class Client:
    """Workflows and runs of one runtime; ``runtime.client``."""

    def __init__(
        self,
        transport: Transport,
        service: Service,
        inputs: InputsService,
        watch: RunWatch,
        env: RuntimeEnv,
    ) -> None:
        self.transport = transport
        self.service = service
        self.inputs = inputs
        self._watch = watch
        self._env = env

    async def register_workflow(self, definition: bytes | str | Mapping[str, Any]) -> WorkflowDef:
        """Validate and store; :class:`WorkflowInvalid` lists every problem."""
        return await self.service.register_workflow(definition)

    async def list_workflows(self) -> list[WorkflowDef]:
        return await self.service.list_workflows()

    async def start_run(
        self, workflow: str, input: JsonValue = None, *, idempotency_key: str | None = None
    ) -> RunHandle:
        """Start a run of a registered workflow; the same ``idempotency_key`` gives the same run."""
        run_id = await self.service.start_run(workflow, input, idempotency_key)
        return RunHandle(run_id, self)

    async def get_run(self, run_id: str) -> RunHandle:
        """A handle to an existing run; :class:`RunNotFound` when there is none."""
        await self.service.get_run(run_id)
        return RunHandle(run_id, self)

    async def list_runs(
        self,
        workflow: str | None = None,
        status: RunStatus | str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> RunPage:
        """Runs newest first (by start); pass ``next_cursor`` back, with the same filters, for
        the next, older page (docs/listing.md)."""
        return await self.service.list_runs(workflow, status, limit, cursor)

    async def wait(self, run_id: str, timeout_s: float) -> RunSnapshot:
        if not 0 < timeout_s <= WAIT_FOR_RUN_MAX_S:
            raise InvalidRequest(f"timeout must be in (0, {WAIT_FOR_RUN_MAX_S}] seconds")
        return await self._watch.wait(run_id, timeout_s)

    def new_request_id(self) -> str:
        return self._env.new_id()


@final
@attrs.frozen
class RunHandle:
    """A run started (or found) through a :class:`Client`."""

    run_id: str
    client: Client = attrs.field(repr=False)

    async def snapshot(self) -> RunSnapshot:
        """The run as the engine last wrote it."""
        return await self.client.service.get_run(self.run_id)

    async def wait(self, timeout_s: float = DEFAULT_RESULT_TIMEOUT_S) -> RunSnapshot:
        """The snapshot once the run has finished, however it finished;
        :class:`RunWaitTimeout` after ``timeout_s``."""
        return await self.client.wait(self.run_id, timeout_s)

    async def result(self, timeout_s: float = DEFAULT_RESULT_TIMEOUT_S) -> JsonValue:
        """The run's output once it completed; :class:`RunFailed` when it failed or was
        cancelled, :class:`RunWaitTimeout` after ``timeout_s``."""
        snap = await self.wait(timeout_s)
        if snap.status is not RunStatus.COMPLETED:
            raise RunFailed(snap)
        return snap.output

    async def cancel(self, reason: str = "cancelled") -> None:
        """Ask the engine to cancel the run (nothing happens to a finished run)."""
        await self.client.service.cancel_run(self.run_id, reason)

    # --- inputs ---------------------------------------------------------------------------

    async def send_input(
        self,
        step_id: str,
        content: JsonValue,
        *,
        mode: Mode | str = Mode.FOLLOW_UP,
        request_id: str | None = None,
    ) -> Submission:
        """Queue an input for an agent step; a repeated ``request_id`` returns the original."""
        rid = request_id if request_id is not None else self.client.new_request_id()
        sub, _created = await self.client.inputs.submit(self.run_id, step_id, rid, mode, content)
        return sub

    async def get_input(
        self, step_id: str, request_id: str, *, wait_s: float | None = None
    ) -> Submission:
        """The input; with ``wait_s``, wait until its status changes (see ``InputsService.get``)."""
        return await self.client.inputs.get(self.run_id, step_id, request_id, wait_s)

    async def withdraw_input(self, step_id: str, request_id: str) -> Submission:
        """Withdraw a queued input (an input already placed can no longer be)."""
        return await self.client.inputs.withdraw(self.run_id, step_id, request_id)

    # --- the journal -----------------------------------------------------------------------

    async def journal(
        self, step_id: str, *, from_seq: int = 1, follow: bool = True
    ) -> AsyncIterator[JournalEntry]:
        """The step's journal records in order; with ``follow``, keep going until the step (or
        the run) has finished and every record written before that was yielded."""
        check_id("step_id", step_id)
        subject = layout.journal_subject(self.run_id, step_id)
        seq = max(from_seq, 1)
        while True:
            done = not follow or await self._step_done(step_id)
            while True:
                msgs = await self.client.transport.read_subject(
                    layout.JOURNAL_STREAM, subject, seq, JOURNAL_READ_BATCH_RECORDS
                )
                for msg in msgs:
                    for rec in decode_records(msg.data):
                        yield JournalEntry(msg.seq, rec)
                    seq = msg.seq + 1
                if len(msgs) < JOURNAL_READ_BATCH_RECORDS:
                    break
            if done:
                return
            await trio.sleep(JOURNAL_POLL_INTERVAL_S)

    async def _step_done(self, step_id: str) -> bool:
        try:
            snap = await self.snapshot()
        except RunNotFound:
            return True
        step = snap.steps.get(step_id)
        return step is None or step.status.finished or snap.status.finished
