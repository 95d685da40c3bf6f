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

__all__ = [
    "AGENT_STEP_ID",
    "AGENT_TASK",
    "DEFAULT_SCRIPT",
    "GOLDEN_FORMAT_VERSION",
    "AgentCounters",
    "Finding",
    "Golden",
    "GoldenFormatError",
    "GoldenHeader",
    "GoldenReport",
    "ScriptedAgent",
    "Turn",
    "agent_workflow",
    "expected_answer",
    "load_golden",
    "parse_golden",
    "replay_golden",
]
