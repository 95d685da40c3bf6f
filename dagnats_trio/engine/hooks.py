"""The seam through which the inputs service takes part in the engine's decisions."""

from __future__ import annotations

from typing import Protocol, final


class InputsHooks(Protocol):
    """Implemented by the inputs service. Both calls must be idempotent: the engine may repeat
    them after a crash."""

    async def has_queued(self, run_id: str, step_id: str) -> bool:
        """True when an input is queued for the step (checked as it enters an input wait)."""

    async def settle_step(self, run_id: str, step_id: str) -> None:
        """The step finished (completed, failed, cancelled, timed out): close it to inputs and
        settle each of its submissions (done when its iteration committed, else unanswered)."""


@final
class NoInputs:
    """No inputs service: nothing is ever queued."""

    async def has_queued(self, run_id: str, step_id: str) -> bool:
        return False

    async def settle_step(self, run_id: str, step_id: str) -> None:
        return None
