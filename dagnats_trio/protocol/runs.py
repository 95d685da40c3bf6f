"""The part of a run snapshot every reader may rely on (the engine owns the full shape)."""

from __future__ import annotations

import enum
from typing import final

import attrs

from ._codec import from_json


class RunStatus(enum.Enum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self is not RunStatus.RUNNING


@final
@attrs.frozen
class RunHeader:
    """Decodes only ``run_id`` and ``status`` of a snapshot in KV ``workflow_runs`` at
    ``run.{run}``; the worker's heartbeat uses it to learn that a run was cancelled."""

    run_id: str
    status: RunStatus


def decode_run_header(data: bytes) -> RunHeader:
    return from_json(data, RunHeader, "run snapshot")
