"""The workflow definition model.

Field names are the JSON keys of a definition, and every duration is held as integer
milliseconds, so the protocol converter's plain encoding of a :class:`WorkflowDef` is itself a
valid definition (that is how definitions are stored in KV and embedded in run snapshots).
User JSON goes through :meth:`WorkflowDef.from_json`, which validates and reports every problem.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, final

import attrs

from ..protocol import converter, to_json

# --- defaults (documented in the docstrings of the fields that use them) ---------------------

#: Attempts per iteration when a step names no retry policy (the first try counts).
DEFAULT_RETRY_MAX_ATTEMPTS = 3
#: Backoff before the second attempt when the policy names none.
DEFAULT_RETRY_INITIAL_DELAY_MS = 1_000
#: Upper bound of any backoff when the policy names none.
DEFAULT_RETRY_MAX_DELAY_MS = 60_000
#: Growth factor of the ``exponential`` strategy when the policy names none.
DEFAULT_RETRY_MULTIPLIER = 2.0
#: Cap on a loop step's checkpoint when its ``agent_loop`` block names none (1 MiB).
DEFAULT_LOOP_STATE_MAX_BYTES = 1_048_576
#: Version of a definition that names none.
DEFAULT_WORKFLOW_VERSION = 1

#: Bounds that catch unit mistakes and runaway configurations.
MAX_ATTEMPTS_LIMIT = 1_000
MAX_ITERATIONS_LIMIT = 10_000_000
MAX_STEPS_PER_WORKFLOW = 1_000
MAX_LOOP_STATE_MAX_BYTES = 64 * 1_048_576


class StepType(enum.Enum):
    NORMAL = "normal"
    AGENT_LOOP = "agent_loop"
    SUB_WORKFLOW = "sub_workflow"


class RetryStrategy(enum.Enum):
    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


@final
@attrs.frozen
class RetryPolicy:
    """Attempts per iteration and the backoff between them (defaults: 3 attempts, fixed 1 s)."""

    max_attempts: int = DEFAULT_RETRY_MAX_ATTEMPTS
    strategy: RetryStrategy = RetryStrategy.FIXED
    initial_delay: int = DEFAULT_RETRY_INITIAL_DELAY_MS
    max_delay: int = DEFAULT_RETRY_MAX_DELAY_MS
    multiplier: float = DEFAULT_RETRY_MULTIPLIER

    def delay_ms(self, failed_attempt: int) -> int:
        """Backoff after attempt number ``failed_attempt`` (1-based) failed."""
        n = max(1, failed_attempt)
        if self.strategy is RetryStrategy.FIXED:
            delay = float(self.initial_delay)
        elif self.strategy is RetryStrategy.LINEAR:
            delay = float(self.initial_delay) * n
        else:
            # Bounded exponent: past ~64 doublings every realistic delay is at max_delay anyway.
            delay = float(self.initial_delay) * self.multiplier ** min(n - 1, 64)
        return int(min(delay, float(self.max_delay)))


@final
@attrs.frozen
class AgentLoopConfig:
    """Bounds of an ``agent_loop`` step. ``max_duration`` (ms, None = unbounded) counts from the
    first dispatch, waits included; ``loop_delay`` (ms) separates iterations that do not wait."""

    max_iterations: int
    max_duration: int | None = None
    loop_delay: int = 0
    loop_state_max_bytes: int = DEFAULT_LOOP_STATE_MAX_BYTES


@final
@attrs.frozen
class SubWorkflowConfig:
    workflow: str


@final
@attrs.frozen
class StepDef:
    """One step. ``timeout`` (ms, None = none) bounds each dispatch, waits of that dispatch
    included; ``task`` is the task type workers register (empty for ``sub_workflow``)."""

    id: str
    task: str = ""
    depends_on: tuple[str, ...] = ()
    type: StepType = StepType.NORMAL
    timeout: int | None = None
    retry: RetryPolicy = RetryPolicy()
    agent_loop: AgentLoopConfig | None = None
    sub_workflow: SubWorkflowConfig | None = None

    @property
    def is_loop(self) -> bool:
        return self.type is StepType.AGENT_LOOP


@final
@attrs.frozen
class WorkflowDef:
    name: str
    steps: tuple[StepDef, ...]
    version: int = DEFAULT_WORKFLOW_VERSION

    def step(self, step_id: str) -> StepDef:
        for s in self.steps:
            if s.id == step_id:
                return s
        raise KeyError(step_id)

    def step_ids(self) -> list[str]:
        return [s.id for s in self.steps]

    @classmethod
    def from_json(cls, data: bytes | str | Mapping[str, Any]) -> WorkflowDef:
        """Parse and validate a definition; :class:`WorkflowInvalid` lists every problem."""
        from ._validate import parse_workflow

        return parse_workflow(data)

    def to_obj(self) -> dict[str, Any]:
        """The definition as plain JSON values (durations in milliseconds)."""
        obj: dict[str, Any] = converter.unstructure(self)
        return obj

    def to_json(self) -> bytes:
        return to_json(self)


@final
@attrs.frozen
class Problem:
    """One thing wrong with a definition. ``step`` is None for workflow-level problems."""

    step: str | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"step {self.step!r}" if self.step is not None else "workflow"
        return f"{where}, {self.field}: {self.message}"


@final
class WorkflowInvalid(ValueError):
    """A definition failed validation; ``problems`` holds every problem found, not just one."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"invalid workflow definition ({len(self.problems)} problems):\n{lines}")
