"""The demo a newcomer runs first (``dagnats demo``): a scripted tool-using agent whose worker
dies in the middle of an unsafe tool call, recovers on a new worker, is steered and followed up,
and whose journal is shown and audited."""

from ._agent import (
    SCRIPT,
    STEP_ID,
    TASK_TYPE,
    UNSAFE_TOOL,
    WORKFLOW_NAME,
    Counters,
    Crash,
    make_agent,
    workflow_definition,
)
from ._run import DEMO_ACK_WAIT_S, DEMO_TIMEOUT_S, DemoResult, run_demo

__all__ = [
    "DEMO_ACK_WAIT_S",
    "DEMO_TIMEOUT_S",
    "SCRIPT",
    "STEP_ID",
    "TASK_TYPE",
    "UNSAFE_TOOL",
    "WORKFLOW_NAME",
    "Counters",
    "Crash",
    "DemoResult",
    "make_agent",
    "run_demo",
    "workflow_definition",
]
