"""The few fields of a run snapshot the inputs service reads.

The engine owns the full shape of the snapshot in KV ``workflow_runs``; this view decodes only
what it needs and ignores the rest (the protocol converter does not forbid extra keys).
This must match ``dagnats_trio/engine/snapshot.py``: the keys ``run_id``, ``status`` and
``steps`` (a mapping of step id to an object with a string ``status``).
"""

from __future__ import annotations

import attrs

from dagnats_trio.protocol import RunStatus, from_json

#: Step statuses that mean the step finished; must match ``dagnats_trio/engine/snapshot.py``.
FINISHED_STEP_STATUSES = frozenset({"completed", "failed", "cancelled"})


@attrs.frozen
class StepView:
    status: str


@attrs.frozen
class RunView:
    run_id: str
    status: RunStatus
    steps: dict[str, StepView] = attrs.field(factory=dict)


def decode_run_view(data: bytes) -> RunView:
    return from_json(data, RunView, "run snapshot")
