"""Workflow definitions: model, durations, validation, ready steps and step inputs. Pure."""

from ._durations import (
    MAX_DURATION_MS,
    DurationError,
    format_duration,
    parse_duration,
    parse_duration_text,
)
from ._validate import parse_workflow, validate
from .graph import find_cycle, ready_steps, run_output, sink_steps, step_input
from .model import (
    DEFAULT_LOOP_STATE_MAX_BYTES,
    DEFAULT_RETRY_INITIAL_DELAY_MS,
    DEFAULT_RETRY_MAX_ATTEMPTS,
    DEFAULT_RETRY_MAX_DELAY_MS,
    DEFAULT_RETRY_MULTIPLIER,
    DEFAULT_WORKFLOW_VERSION,
    AgentLoopConfig,
    Problem,
    RetryPolicy,
    RetryStrategy,
    StepDef,
    StepType,
    SubWorkflowConfig,
    WorkflowDef,
    WorkflowInvalid,
)

__all__ = [
    "DEFAULT_LOOP_STATE_MAX_BYTES",
    "DEFAULT_RETRY_INITIAL_DELAY_MS",
    "DEFAULT_RETRY_MAX_ATTEMPTS",
    "DEFAULT_RETRY_MAX_DELAY_MS",
    "DEFAULT_RETRY_MULTIPLIER",
    "DEFAULT_WORKFLOW_VERSION",
    "MAX_DURATION_MS",
    "AgentLoopConfig",
    "DurationError",
    "Problem",
    "RetryPolicy",
    "RetryStrategy",
    "StepDef",
    "StepType",
    "SubWorkflowConfig",
    "WorkflowDef",
    "WorkflowInvalid",
    "find_cycle",
    "format_duration",
    "parse_duration",
    "parse_duration_text",
    "parse_workflow",
    "ready_steps",
    "run_output",
    "sink_steps",
    "step_input",
    "validate",
]
