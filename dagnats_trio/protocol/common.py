"""Values shared by events, tasks and journal records."""

from __future__ import annotations

from typing import final

import attrs


@final
@attrs.frozen
class DispatchId:
    """The identity the engine stamps on each dispatch of a step.

    A stalled worker and its replacement receive the same task message and so share this
    identity; the engine applies a lifecycle event only when it matches the step's current
    dispatch, which is what stops a duplicate ``step.continue`` from advancing a loop twice.
    """

    iteration: int
    attempt: int
    nonce: str


@final
@attrs.frozen
class Wait:
    """A durable wait requested by ``continue_``: any mix, whichever comes first wakes the step.

    ``until_ms`` is wall-clock epoch milliseconds; ``delay_ms`` counts from when the engine
    enters the wait.
    """

    delay_ms: int | None = None
    until_ms: int | None = None
    until_input: bool = False

    def is_empty(self) -> bool:
        return self.delay_ms is None and self.until_ms is None and not self.until_input


@final
@attrs.frozen
class ParentRef:
    """The step of a parent run that started a child run (``sub_workflow``)."""

    run_id: str
    step_id: str
