"""A run's result as a client reads it: its status, error and each step's status and output,
decoded from the stored snapshot without the parts only the engine needs (the definition, the
outbox, each step's dispatch and timing), whose decode makes a whole :class:`RunSnapshot`
several times dearer. For a caller in the engine's process that only waits for results (the
benchmark's client), so waiting costs the process little beside the runs themselves.
"""

from __future__ import annotations

from typing import final

import attrs

from ..protocol import JsonValue, RunStatus, from_json
from .snapshot import StepStatus


@final
@attrs.frozen
class StepOutcome:
    """What a client reads of one step: the fields of the snapshot's step state it needs."""

    status: StepStatus = StepStatus.PENDING
    output: JsonValue = None


@final
@attrs.frozen
class RunOutcome:
    """What a client reads of a run; ``outputs()`` is :meth:`RunSnapshot.outputs`."""

    run_id: str
    status: RunStatus
    error: str | None = None
    steps: dict[str, StepOutcome] = attrs.field(factory=dict)

    def outputs(self) -> dict[str, JsonValue]:
        return {
            sid: st.output for sid, st in self.steps.items() if st.status is StepStatus.COMPLETED
        }


def decode_run_outcome(data: bytes) -> RunOutcome:
    """The outcome in a stored snapshot; :class:`protocol.DecodeError` on anything that is not
    one (the keys it does not read are not looked at)."""
    return from_json(data, RunOutcome, "run snapshot")
