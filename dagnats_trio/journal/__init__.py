"""The per-step journal: claims and fencing, durable tool and model calls, commits, the audit.

``await tc.journal()`` gives a :class:`Journal`; the rules it follows are pure functions in
``_replay`` and the audit is :func:`check.check`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagnats_trio._defaults import (
    DEFAULT_RESTART_LIMIT,
    MAX_RESTART_LIMIT,
    MIN_RESTART_LIMIT,
    check_restart_limit,
)
from dagnats_trio._lazy import lazy_exports
from dagnats_trio.protocol import CommitAction, Replay

from ._errors import (
    CallLimitExceeded,
    Committed,
    Fenced,
    HolderKilled,
    JournalCorrupt,
    JournalSettled,
    JournalUnreadable,
    ReplayMismatch,
    RestartLimit,
    Stale,
    ToolOutputNotJson,
)
from ._replay import (
    MAX_CALLS_PER_ITERATION,
    RESTART_LIMIT_REASON,
    UNREADABLE_REASON,
    TaskIdentity,
    ToolResult,
    call_key,
)
from .check import UNDECODABLE_RULE, CheckReport, Unreadable, Violation, check

if TYPE_CHECKING:
    from ._calls import (
        Completion,
        GroupCall,
        ModelFn,
        NextTool,
        ThenComplete,
        ThenContinue,
        ThenTool,
        ToolCall,
        ToolFn,
    )
    from ._committed import CommittedIteration, OnCommitted
    from ._events import publish_lifecycle
    from ._fencing import MAX_GROUP_MESSAGE_BYTES, TAIL_PROOF_FRESH_S
    from ._golden import (
        Finding,
        GoldenDelivery,
        GoldenJournal,
        ReplayStopped,
        commit_changes,
        golden_deliveries,
    )
    from ._group import MAX_GROUP_CALLS
    from ._handle import Journal
    from ._holder import (
        DeliveryState,
        Settlement,
    )
    from ._known import KNOWN_COMMITS_MAX_SUBJECTS, KnownCommits
    from ._model import (
        ScriptedModel,
        ScriptExhausted,
    )
    from ._open import open_journal
    from ._reads import (
        READ_PAGE_RECORDS,
        load_commit_state,
        read_journal,
        read_journal_for_audit,
    )
    from ._settle import SettleRequest, settle_delivery
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._events": ("publish_lifecycle",),
            "._fencing": ("MAX_GROUP_MESSAGE_BYTES", "TAIL_PROOF_FRESH_S"),
            "._calls": (
                "Completion",
                "GroupCall",
                "ModelFn",
                "NextTool",
                "ThenComplete",
                "ThenContinue",
                "ThenTool",
                "ToolCall",
                "ToolFn",
            ),
            "._committed": ("CommittedIteration", "OnCommitted"),
            "._group": ("MAX_GROUP_CALLS",),
            "._handle": ("Journal",),
            "._known": ("KNOWN_COMMITS_MAX_SUBJECTS", "KnownCommits"),
            "._open": ("open_journal",),
            "._reads": (
                "READ_PAGE_RECORDS",
                "load_commit_state",
                "read_journal",
                "read_journal_for_audit",
            ),
            "._golden": (
                "Finding",
                "GoldenDelivery",
                "GoldenJournal",
                "ReplayStopped",
                "commit_changes",
                "golden_deliveries",
            ),
            "._holder": (
                "DeliveryState",
                "Settlement",
            ),
            "._settle": ("SettleRequest", "settle_delivery"),
            "._model": (
                "ScriptedModel",
                "ScriptExhausted",
            ),
        },
    )

__all__ = [
    "DEFAULT_RESTART_LIMIT",
    "KNOWN_COMMITS_MAX_SUBJECTS",
    "MAX_CALLS_PER_ITERATION",
    "MAX_GROUP_CALLS",
    "MAX_GROUP_MESSAGE_BYTES",
    "MAX_RESTART_LIMIT",
    "MIN_RESTART_LIMIT",
    "READ_PAGE_RECORDS",
    "RESTART_LIMIT_REASON",
    "TAIL_PROOF_FRESH_S",
    "UNDECODABLE_RULE",
    "UNREADABLE_REASON",
    "CallLimitExceeded",
    "CheckReport",
    "CommitAction",
    "Committed",
    "CommittedIteration",
    "Completion",
    "DeliveryState",
    "Fenced",
    "Finding",
    "GoldenDelivery",
    "GoldenJournal",
    "GroupCall",
    "HolderKilled",
    "Journal",
    "JournalCorrupt",
    "JournalSettled",
    "JournalUnreadable",
    "KnownCommits",
    "ModelFn",
    "NextTool",
    "OnCommitted",
    "Replay",
    "ReplayMismatch",
    "ReplayStopped",
    "RestartLimit",
    "ScriptExhausted",
    "ScriptedModel",
    "SettleRequest",
    "Settlement",
    "Stale",
    "TaskIdentity",
    "ThenComplete",
    "ThenContinue",
    "ThenTool",
    "ToolCall",
    "ToolFn",
    "ToolOutputNotJson",
    "ToolResult",
    "Unreadable",
    "Violation",
    "call_key",
    "check",
    "check_restart_limit",
    "commit_changes",
    "golden_deliveries",
    "load_commit_state",
    "open_journal",
    "publish_lifecycle",
    "read_journal",
    "read_journal_for_audit",
    "settle_delivery",
]
