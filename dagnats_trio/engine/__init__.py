"""The workflow engine: a pure decision core (:func:`advance`) and its I/O shell."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagnats_trio._lazy import lazy_exports

from .core import (
    SERVICE_START_SEQ,
    TIMER_LOOP_DELAY,
    TIMER_MAX_DURATION,
    TIMER_PAUSE,
    TIMER_RETRY,
    TIMER_TIMEOUT,
    TIMER_WAIT,
    AdvanceContext,
    Outcome,
    advance,
    child_run_id,
    decide,
    first_dispatch,
    first_dispatch_again,
    new_run_snapshot,
    service_start_entry,
    started_msg_id,
    timer_id,
)
from .effects import (
    AnnounceCancel,
    ArmTimer,
    CheckQueuedInputs,
    Effect,
    PublishEvent,
    PublishTask,
    SettleInputs,
)
from .hooks import InputsHooks, NoInputs
from .snapshot import (
    OutboxEntry,
    Park,
    RunSnapshot,
    SnapshotEncoder,
    StepState,
    StepStatus,
    decode_snapshot,
    definition_ref,
    encode_snapshot,
)

if TYPE_CHECKING:
    from ._definition_refs import DEFINITION_REFS_KEPT_MAX, DefinitionRefs
    from ._run_index import drop_active, ensure_run_index, index_entry, index_run
    from ._shell import Engine
    from ._shell_state import (
        ENGINE_ACK_WAIT_S,
        LEGACY_ENV_VAR,
        LOOP_ERROR_BACKOFF_MAX_S,
        LOOP_ERROR_BACKOFF_S,
        SNAPSHOT_MAX_BYTES,
        EngineStats,
        legacy_from_env,
        snapshot_max_bytes,
    )
    from ._start_sweep import (
        START_SWEEP_AFTER_S,
        START_SWEEP_EVERY_S,
        StartSweep,
        SweepReport,
        SweepStats,
    )
    from ._store import (
        IndexedStart,
        create_snapshot,
        index_start,
        start_dispatched,
        started_publish_msg,
        write_first_snapshot,
    )
    from ._timer_stream import TIMER_DUE_HEADER, TIMER_ID_HEADER, arm_timer, timer_consumer
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._definition_refs": ("DEFINITION_REFS_KEPT_MAX", "DefinitionRefs"),
            "._store": (
                "IndexedStart",
                "create_snapshot",
                "index_start",
                "start_dispatched",
                "started_publish_msg",
                "write_first_snapshot",
            ),
            "._run_index": ("drop_active", "ensure_run_index", "index_entry", "index_run"),
            "._shell": ("Engine",),
            "._shell_state": (
                "ENGINE_ACK_WAIT_S",
                "LEGACY_ENV_VAR",
                "LOOP_ERROR_BACKOFF_MAX_S",
                "LOOP_ERROR_BACKOFF_S",
                "SNAPSHOT_MAX_BYTES",
                "EngineStats",
                "legacy_from_env",
                "snapshot_max_bytes",
            ),
            "._start_sweep": (
                "START_SWEEP_AFTER_S",
                "START_SWEEP_EVERY_S",
                "StartSweep",
                "SweepReport",
                "SweepStats",
            ),
            "._timer_stream": (
                "TIMER_DUE_HEADER",
                "TIMER_ID_HEADER",
                "arm_timer",
                "timer_consumer",
            ),
        },
    )

__all__ = [
    "DEFINITION_REFS_KEPT_MAX",
    "ENGINE_ACK_WAIT_S",
    "LEGACY_ENV_VAR",
    "LOOP_ERROR_BACKOFF_MAX_S",
    "LOOP_ERROR_BACKOFF_S",
    "SERVICE_START_SEQ",
    "SNAPSHOT_MAX_BYTES",
    "START_SWEEP_AFTER_S",
    "START_SWEEP_EVERY_S",
    "TIMER_DUE_HEADER",
    "TIMER_ID_HEADER",
    "TIMER_LOOP_DELAY",
    "TIMER_MAX_DURATION",
    "TIMER_PAUSE",
    "TIMER_RETRY",
    "TIMER_TIMEOUT",
    "TIMER_WAIT",
    "AdvanceContext",
    "AnnounceCancel",
    "ArmTimer",
    "CheckQueuedInputs",
    "DefinitionRefs",
    "Effect",
    "Engine",
    "EngineStats",
    "IndexedStart",
    "InputsHooks",
    "NoInputs",
    "OutboxEntry",
    "Outcome",
    "Park",
    "PublishEvent",
    "PublishTask",
    "RunSnapshot",
    "SettleInputs",
    "SnapshotEncoder",
    "StartSweep",
    "StepState",
    "StepStatus",
    "SweepReport",
    "SweepStats",
    "advance",
    "arm_timer",
    "child_run_id",
    "create_snapshot",
    "decide",
    "decode_snapshot",
    "definition_ref",
    "drop_active",
    "encode_snapshot",
    "ensure_run_index",
    "first_dispatch",
    "first_dispatch_again",
    "index_entry",
    "index_run",
    "index_start",
    "legacy_from_env",
    "new_run_snapshot",
    "service_start_entry",
    "snapshot_max_bytes",
    "start_dispatched",
    "started_msg_id",
    "started_publish_msg",
    "timer_consumer",
    "timer_id",
    "write_first_snapshot",
]
