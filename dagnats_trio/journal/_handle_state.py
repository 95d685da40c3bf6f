"""The journal handle's state and writes: what one delivery's handle holds after its claim.

Its identity (the inputs service's ``JournalWriter`` protocol), the state of record, the fenced
appends (guarded like the calls), and the commit that closes the iteration and publishes the
lifecycle event. The calls that take positions (model, tool, group) are ``_handle``'s
:class:`~._handle.Journal`, built on this.
"""

from __future__ import annotations

from typing import Any

import trio

from dagnats_trio._seams import Seam, current_hook
from dagnats_trio.protocol import (
    CommitAction,
    CommitRecord,
    InputPlacedRecord,
    JournalRecord,
    JsonValue,
    Wait,
)
from dagnats_trio.transport import Transport

from ._calls import CallGuard, require_json_value
from ._committed import OnCommitted, notify_committed
from ._events import publish_lifecycle
from ._fencing import FencedWriter
from ._holder import DeliveryState, Settlement
from ._pairs import Pairing
from ._reads import load_commit_state
from ._replay import ReplayView, TaskIdentity, event_for_commit
from ._tool_run import ToolRunner

_UNSET: Any = object()


class HandleState:
    """The state and writes of :class:`~._handle.Journal` (its base: not used alone)."""

    def __init__(
        self,
        *,
        transport: Transport,
        task: TaskIdentity,
        holder: DeliveryState,
        writer: FencedWriter,
        view: ReplayView,
        on_committed: OnCommitted | None,
    ) -> None:
        self._transport = transport
        self._task = task
        self._holder = holder
        self._writer = writer
        self._claim_id = writer.claim_id
        self._view = view
        self._on_committed = on_committed
        self._tools = ToolRunner(task=task, holder=holder, writer=writer)
        self._guard = CallGuard("another task is using this journal handle")
        self._next_call = view.call_offset
        self._consumed: frozenset[int] = frozenset()
        self._placed: list[InputPlacedRecord] = list(view.placed)
        self._pending_state: JsonValue = _UNSET
        self._base_state: JsonValue = _UNSET
        if view.base is not None and isinstance(view.base[1], CommitRecord):
            self._base_state = view.base[1].state
        elif task.journal_seq is None:
            self._base_state = None
        self._closed = False
        self._pairs = Pairing(writer, self._tools, holder)

    # --- identity (the inputs service's JournalWriter protocol) ------------------------------

    @property
    def run_id(self) -> str:
        return self._task.run_id

    @property
    def step_id(self) -> str:
        return self._task.step_id

    @property
    def iteration(self) -> int:
        return self._task.iteration

    @property
    def attempt(self) -> int:
        return self._task.attempt

    @property
    def claim_id(self) -> str:
        return self._claim_id

    @property
    def last_seq(self) -> int:
        """The last sequence this writer saw (its claim, then each of its appends)."""
        return self._writer.last_seq

    @property
    def next_call(self) -> int:
        """The position the next model or tool call takes."""
        return self._next_call

    def placed_inputs(self) -> list[InputPlacedRecord]:
        """input.placed records of this iteration since its last pause (all deliveries and
        attempts), then the ones this delivery appended; each request id once."""
        return list(self._placed)

    # --- state --------------------------------------------------------------------------------

    async def load_state(self) -> JsonValue:
        """The state of record: the last ``set_state`` of this delivery, else the state of the
        commit this iteration started from (one get by sequence at most, then cached)."""
        if self._pending_state is not _UNSET or self._base_state is not _UNSET:
            await trio.lowlevel.checkpoint()  # known: no read, so no other scheduler pass
        return await self._state_of_record()

    async def _state_of_record(self) -> JsonValue:
        """:meth:`load_state` without a checkpoint: the commit's append right after yields."""
        if self._pending_state is not _UNSET:
            return self._pending_state
        if self._base_state is _UNSET:
            self._base_state = await load_commit_state(self._transport, self._task)
        return self._base_state

    def set_state(self, state: JsonValue) -> None:
        """The state the next commit carries (no size cap: the journal is the state of record)."""
        require_json_value("checkpoint state", state)
        self._pending_state = state

    # --- appends ------------------------------------------------------------------------------

    async def append(self, record: JournalRecord) -> int:
        """Fenced append of a record of this writer (raises :class:`Fenced` on a lost tail).

        Guarded like the calls: an append from a second task while a call runs would take a
        position out of the order replay relies on. ``place_inputs`` appends through here, so
        each of its records is guarded too.
        """
        with self._guard:
            return await self._append_checked(record)

    async def _append_checked(self, record: JournalRecord) -> int:
        t = self._task
        if (record.iteration, record.attempt) != (t.iteration, t.attempt) or (
            record.claim_id != self._claim_id
        ):
            raise ValueError(
                "a record appended through this handle must carry its iteration, attempt and "
                f"claim_id ({t.iteration}, {t.attempt}, {self._claim_id!r})"
            )
        self._check_open()
        seq = await self._writer.append(record)
        if isinstance(record, InputPlacedRecord) and all(
            p.request_id != record.request_id for p in self._placed
        ):
            self._placed.append(record)
        return seq

    def _check_open(self) -> None:
        self._holder.check_writable()
        if self._closed:
            raise RuntimeError("this iteration is committed: the journal handle is closed")

    # --- commit -------------------------------------------------------------------------------

    async def settle(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        reason: str | None = None,
        pause_ms: int | None = None,
    ) -> int:
        """Commit the iteration (action, state, output, wait, ...), then publish the lifecycle
        event with the commit's sequence as ``journal_seq``. Returns that sequence."""
        return await self.settle_checked(
            action,
            output=output,
            wait=wait,
            error=error,
            retriable=retriable,
            reason=reason,
            pause_ms=pause_ms,
            output_checked=False,
        )

    async def settle_checked(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        reason: str | None = None,
        pause_ms: int | None = None,
        output_checked: bool,
    ) -> int:
        """:meth:`settle`, for a caller that may have checked ``output`` by the JSON policy
        already (``output_checked``: :func:`~._settle.settle_delivery` for ``tc.complete`` and
        the bridge, which check it before they begin settling, so that a bad output leaves the
        step unsettled): the output is then not walked a second time."""
        with self._guard:
            self._check_open()
            if not output_checked:
                require_json_value("step output", output)
            return await self._settle(
                action,
                output=output,
                wait=wait,
                error=error,
                retriable=retriable,
                reason=reason,
                pause_ms=pause_ms,
            )

    async def _settle(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        reason: str | None = None,
        pause_ms: int | None = None,
    ) -> int:
        t = self._task
        self._pairs.hold_unrun()
        state = await self._state_of_record()
        commit = CommitRecord(
            t.iteration,
            t.attempt,
            self._claim_id,
            t.nonce,
            action,
            state=state,
            output=output,
            wait=wait,
            error=error,
            retriable=retriable,
            reason=reason,
            pause_ms=pause_ms,
        )
        seq = await self._writer.append(commit)
        self._closed = True
        if current_hook() is not None and self._pairs.result_held:
            await self._holder.seam(Seam.AFTER_TOOL_RESULT)  # stored with the commit
        if current_hook() is not None:
            await self._holder.seam(Seam.AFTER_COMMIT)
        if action is not CommitAction.FAIL and self._on_committed is not None:
            ids = tuple(p.request_id for p in self._placed)
            await notify_committed(self._on_committed, t, commit, seq, ids)
        await publish_lifecycle(self._transport, event_for_commit(commit, t, seq))
        self._holder.settlement = Settlement.ACK
        if current_hook() is not None:
            await self._holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
        return seq
