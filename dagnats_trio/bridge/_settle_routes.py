"""The bridge's routes that settle a lease: complete, fail, continue (with a wait) and pause.

Each is the Python SDK's settlement (:func:`settle_delivery`: commit then publish once claimed,
else publish the lifecycle event with the dispatch identity), then the ack; the checks before it
(the run cancelled, inputs queued for an ``until_input`` wait, the bounds of a wait) are the
bridge's, so a client in any language gets an answer it can act on. A mixin of :class:`Bridge`,
which holds the lease table, the transport and the inputs service.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..inputs import InputsService
from ..journal import SettleRequest, settle_delivery
from ..protocol import CommitAction, JsonValue, Wait
from ..transport import NotProvisioned, Transport, TransportError
from ..worker import MAX_WAIT_MS
from ._errors import BridgeError, bad_request
from ._lease import Lease, check_active, check_claim_stored, finish, journal_call
from ._leases import LeaseTable
from ._records import compact_json
from ._views import MAX_UNTIL_MS, Settled


class SettleRoutes(ABC):
    """The settling routes of :class:`~._bridge.Bridge`."""

    _transport: Transport
    _inputs: InputsService | None
    _leases: LeaseTable

    @abstractmethod
    async def _run_cancelled(self, run_id: str) -> bool:
        """Whether the run's snapshot says it is cancelled."""

    @abstractmethod
    async def _cancel(self, lease: Lease) -> BridgeError:
        """Give up ``lease`` for the run's cancellation; the error to answer with."""

    async def complete(self, token: str, output: JsonValue) -> Settled:
        return await self._settle(token, CommitAction.COMPLETE, output=output)

    async def fail(self, token: str, error: str, retriable: bool) -> Settled:
        if not error.strip():
            raise bad_request("error must say why the step failed (not blank)", "invalid_error")
        return await self._settle(token, CommitAction.FAIL, error=error, retriable=retriable)

    async def continue_(
        self,
        token: str,
        output: JsonValue,
        *,
        delay_ms: int | None = None,
        until_ms: int | None = None,
        until_input: bool = False,
    ) -> Settled:
        for name, value in (("delay_ms", delay_ms), ("until_ms", until_ms)):
            if value is not None and value < 0:
                raise bad_request(f"{name} must be >= 0, got {value}", "invalid_wait")
        if delay_ms is not None and delay_ms > MAX_WAIT_MS:
            raise bad_request(f"delay_ms may be at most {MAX_WAIT_MS}", "invalid_wait")
        if until_ms is not None and until_ms > MAX_UNTIL_MS:
            raise bad_request(f"until_ms may be at most {MAX_UNTIL_MS}", "invalid_wait")
        wait = Wait(delay_ms=delay_ms, until_ms=until_ms, until_input=until_input)
        return await self._settle(
            token, CommitAction.CONTINUE, output=output, wait=None if wait.is_empty() else wait
        )

    async def pause(self, token: str, duration_ms: int) -> Settled:
        if not 0 <= duration_ms <= MAX_WAIT_MS:
            raise bad_request(f"duration_ms must be from 0 to {MAX_WAIT_MS}", "invalid_wait")
        return await self._settle(token, CommitAction.PAUSE, pause_ms=duration_ms)

    async def _settle(
        self,
        token: str,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        pause_ms: int | None = None,
    ) -> Settled:
        """Commit then publish once claimed (the SDK's ``settle``), else publish the lifecycle
        event with the dispatch identity; then ack."""
        compact_json(output, "output")
        async with self._leases.use(token) as lease:
            check_active(lease)
            check_claim_stored(lease)
            t = lease.task
            if await self._run_cancelled(t.run_id):
                raise await self._cancel(lease)
            if (
                wait is not None
                and wait.until_input
                and self._inputs is not None
                and await self._inputs.has_queued(t.run_id, t.step_id)
            ):
                raise BridgeError(
                    409,
                    "inputs_queued",
                    f"inputs are queued for step {t.step_id!r}: place them and run a turn "
                    "(nothing was settled)",
                )
            journal = lease.journal
            # compact_json above checked the output by the JSON policy.
            request = SettleRequest(
                action, output, wait, error, retriable, pause_ms, output_checked=True
            )
            try:
                seq = await journal_call(
                    lease,
                    lambda: settle_delivery(self._transport, lease.holder, journal, request),
                )
            except TransportError as exc:
                if journal is None:
                    raise
                # The commit may have stored: the handle is closed either way, so the task
                # is left for redelivery, whose claim republishes a stored commit.
                code = "not_provisioned" if isinstance(exc, NotProvisioned) else "unavailable"
                lease.finished = (
                    503,
                    code,
                    f"NATS failed while settling ({exc}); the task is left for redelivery",
                )
                raise BridgeError(*lease.finished) from None
            await finish(lease, 410, "settled", "this task is already settled")
            return Settled(action.value, seq)
