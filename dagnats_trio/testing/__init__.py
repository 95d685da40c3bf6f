"""Aids for testing durable agents, in the spirit of ``trio.testing``.

:class:`ScriptedAgent` is the agent of the spec's "How it is verified" section: a safe tool, an
unsafe tool, a safe tool, an answer, with tools that count their starts and effects outside the
journal. The crash-point matrix, the chaos soak, the benchmarks and the demo all run it.
"""

from ..journal import Finding
from ..worker import (
    GOLDEN_FORMAT_VERSION,
    Golden,
    GoldenFormatError,
    GoldenHeader,
    GoldenReport,
    load_golden,
    parse_golden,
    replay_golden,
)
from ._agent import (
    AGENT_STEP_ID,
    AGENT_TASK,
    DEFAULT_SCRIPT,
    AgentCounters,
    ScriptedAgent,
    Turn,
    agent_workflow,
    expected_answer,
)
from ._crash import crash_test, crash_test_async
from ._crash_plan import CRASH_SEAMS, CrashPlan, CrashReport, CrashRun, draw_crash_schedule
from ._harness import retrying, wait_finished
from ._scheduling import SchedulingUnavailable, run_deterministic
from ._seam_faults import (
    NODE_KINDS,
    ArmFn,
    CrashKill,
    Fault,
    FaultKind,
    SeamFaults,
    Target,
)
from ._trace import Trace

__all__ = [
    "AGENT_STEP_ID",
    "AGENT_TASK",
    "CRASH_SEAMS",
    "DEFAULT_SCRIPT",
    "GOLDEN_FORMAT_VERSION",
    "NODE_KINDS",
    "AgentCounters",
    "ArmFn",
    "CrashKill",
    "CrashPlan",
    "CrashReport",
    "CrashRun",
    "Fault",
    "FaultKind",
    "Finding",
    "Golden",
    "GoldenFormatError",
    "GoldenHeader",
    "GoldenReport",
    "SchedulingUnavailable",
    "ScriptedAgent",
    "SeamFaults",
    "Target",
    "Trace",
    "Turn",
    "agent_workflow",
    "crash_test",
    "crash_test_async",
    "draw_crash_schedule",
    "expected_answer",
    "load_golden",
    "parse_golden",
    "replay_golden",
    "retrying",
    "run_deterministic",
    "wait_finished",
]
