"""dagnats-trio: a durable workflow and agent runtime for Trio, on NATS JetStream.

The names most programs need are here; each subpackage (``transport``, ``server``, ``engine``,
``worker``, ``journal``, ``inputs``, ``api``, ``bridge``, ``dag``, ``testing``) exports the rest.
Nothing is started on import and nothing is global: every part is an object you start with
``await nursery.start(part.run)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagnats_trio._lazy import lazy_exports

if TYPE_CHECKING:
    from .api import (
        RunNotFound,
        Service,
        WorkflowNotFound,
    )
    from .bridge import (
        Bridge,
    )
    from .dag import (
        WorkflowDef,
        WorkflowInvalid,
    )
    from .engine import (
        Engine,
    )
    from .inputs import (
        InputsEndpoints,
        InputsService,
        Mode,
    )
    from .journal import (
        Committed,
        Fenced,
        Journal,
        JournalSettled,
        Replay,
        ReplayMismatch,
        RestartLimit,
        ScriptedModel,
        Stale,
        ToolCall,
        ToolResult,
    )
    from .runtime import (
        Listen,
        RunFailed,
        RunHandle,
        Runtime,
        RuntimeConfig,
        open_runtime,
    )
    from .server import (
        NatsCluster,
        NatsServer,
        open_nats_cluster,
        open_nats_server,
    )
    from .transport import (
        Transport,
        open_nats_transport,
        open_sim_transport,
        provision,
    )
    from .worker import (
        Delay,
        InputsQueued,
        RunCancelled,
        TaskContext,
        Until,
        UntilInput,
        Worker,
    )
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            ".api": (
                "RunNotFound",
                "Service",
                "WorkflowNotFound",
            ),
            ".bridge": ("Bridge",),
            ".dag": (
                "WorkflowDef",
                "WorkflowInvalid",
            ),
            ".engine": ("Engine",),
            ".inputs": (
                "InputsEndpoints",
                "InputsService",
                "Mode",
            ),
            ".journal": (
                "Committed",
                "Fenced",
                "Journal",
                "JournalSettled",
                "Replay",
                "ReplayMismatch",
                "RestartLimit",
                "ScriptedModel",
                "Stale",
                "ToolCall",
                "ToolResult",
            ),
            ".runtime": (
                "Listen",
                "RunFailed",
                "RunHandle",
                "Runtime",
                "RuntimeConfig",
                "open_runtime",
            ),
            ".server": (
                "NatsCluster",
                "NatsServer",
                "open_nats_cluster",
                "open_nats_server",
            ),
            ".transport": (
                "Transport",
                "open_nats_transport",
                "open_sim_transport",
                "provision",
            ),
            ".worker": (
                "Delay",
                "InputsQueued",
                "RunCancelled",
                "TaskContext",
                "Until",
                "UntilInput",
                "Worker",
            ),
        },
    )

__all__ = [
    "Bridge",
    "Committed",
    "Delay",
    "Engine",
    "Fenced",
    "InputsEndpoints",
    "InputsQueued",
    "InputsService",
    "Journal",
    "JournalSettled",
    "Listen",
    "Mode",
    "NatsCluster",
    "NatsServer",
    "Replay",
    "ReplayMismatch",
    "RestartLimit",
    "RunCancelled",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "Runtime",
    "RuntimeConfig",
    "ScriptedModel",
    "Service",
    "Stale",
    "TaskContext",
    "ToolCall",
    "ToolResult",
    "Transport",
    "Until",
    "UntilInput",
    "Worker",
    "WorkflowDef",
    "WorkflowInvalid",
    "WorkflowNotFound",
    "open_nats_cluster",
    "open_nats_server",
    "open_nats_transport",
    "open_runtime",
    "open_sim_transport",
    "provision",
]
