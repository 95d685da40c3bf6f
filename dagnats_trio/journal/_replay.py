"""The journal's rules as pure functions over records: no I/O, no clock, no randomness.

This module is their one import point; the rules live in modules of one idea each:
``_replay_task`` (the task, its entries, call keys and canonical JSON), ``_replay_claim`` (judge
the tail, plan the claim, the replay view), ``_replay_calls`` (a call at a position: reuse,
honour, run or mismatch) and ``_replay_commits`` (a commit's lifecycle event).

The shell (``_open``, ``_handle``, ``_fencing``) does the reads and writes; every decision it
makes comes from here, so the rules of the spec ("The journal", "Tools", "Model calls", retry
versus redelivery, "Restart limit") can be tested one by one with Hypothesis.

Terms used throughout:

- *entries* are ``(sequence, record)`` pairs of one step's journal, in sequence order;
- an *iteration's records* are the entries whose record names that iteration;
- a *segment* is the part of an iteration after its last pause commit. A pause is a commit point:
  the state it carries is the state of record, the calls before it are done, and call positions
  after it continue from where they stopped (so every call key of an iteration is distinct);
- *this attempt* is the task's attempt. Redelivery of one attempt replays its recorded calls by
  position; a new attempt runs safe calls and model requests fresh and honours only the unsafe
  tool intents of earlier attempts (in the segment), matched by name and input.
"""

from __future__ import annotations

from ._replay_calls import (
    GroupMember,
    ModelAction,
    ModelDecision,
    ToolAction,
    ToolDecision,
    ToolResult,
    decide_group,
    decide_model,
    decide_tool,
)
from ._replay_claim import (
    ClaimPlan,
    Origin,
    PlanKind,
    RecordedCall,
    RecordedModel,
    RecordedTool,
    ReplayView,
    TailKind,
    TailVerdict,
    empty_view,
    judge_tail,
    plan_claim,
    restart_limit_reached,
)
from ._replay_commits import event_for_commit, placed_before
from ._replay_task import (
    MAX_CALLS_PER_ITERATION,
    NOT_JSON_ERROR_PREFIX,
    RESTART_LIMIT_REASON,
    UNREADABLE_REASON,
    Entry,
    TaskIdentity,
    call_key,
    canonical_json,
)

__all__ = [
    "MAX_CALLS_PER_ITERATION",
    "NOT_JSON_ERROR_PREFIX",
    "RESTART_LIMIT_REASON",
    "UNREADABLE_REASON",
    "ClaimPlan",
    "Entry",
    "GroupMember",
    "ModelAction",
    "ModelDecision",
    "Origin",
    "PlanKind",
    "RecordedCall",
    "RecordedModel",
    "RecordedTool",
    "ReplayView",
    "TailKind",
    "TailVerdict",
    "TaskIdentity",
    "ToolAction",
    "ToolDecision",
    "ToolResult",
    "call_key",
    "canonical_json",
    "decide_group",
    "decide_model",
    "decide_tool",
    "empty_view",
    "event_for_commit",
    "judge_tail",
    "placed_before",
    "plan_claim",
    "restart_limit_reached",
]
