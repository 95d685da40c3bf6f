"""Whether a run's input fits the run: refused before anything of the run is written.

A run's first snapshot holds its input once as the run's, and again in the task of each first
step that takes it (a service-dispatched start saves its tasks in the outbox). The snapshot must
fit one NATS message (``engine.SNAPSHOT_MAX_BYTES``), so the input a run can take depends on its
workflow: found from outside, two first steps and an input of 400 KiB (under the input bound)
made a 1.2 MB snapshot whose create failed, answered 500 after the run was indexed (a
workflow's first start instead stored the run and failed it, ``snapshot_too_large``).
"""

from __future__ import annotations

from typing import Final

from ..dag import WorkflowDef
from ..engine import SNAPSHOT_MAX_BYTES, SnapshotEncoder, first_dispatch
from ..protocol import WorkflowStarted
from ._service_errors import InputTooLarge

#: Largest run input (as encoded) a start takes, whatever the workflow: the snapshot of a run of
#: one first step holds it twice; 480 KiB leaves 64 KiB of the default 1 MiB ``max_payload`` for
#: the rest of the run's state (found from outside: an input of a million characters was 500).
RUN_INPUT_MAX_BYTES: Final = 480 * 1024
#: An input encoded in at most this many bytes is not measured against its run's first
#: snapshot: even copied into each of the most first steps a usual workflow has, it fits; a
#: workflow with hundreds of first steps is still caught by the engine's own bound (the run
#: fails, ``snapshot_too_large``). Above it the snapshot is built and encoded once more.
INPUT_MEASURED_FROM_BYTES: Final = 64 * 1024
#: The run id and nonces of the measured snapshot: as long as a real one (16 hex digits).
PROBE_ID: Final = "0" * 16


def check_input_fits(
    event: WorkflowStarted, definition: WorkflowDef, input_size_bytes: int
) -> None:
    """Raise :class:`InputTooLarge` when ``event``'s input (``input_size_bytes`` encoded) is
    over :data:`RUN_INPUT_MAX_BYTES`, or its run's first snapshot, dispatched as the service
    dispatches it (``engine.first_dispatch``), would be over ``SNAPSHOT_MAX_BYTES``.

    Pure (no I/O) and without ids drawn from the service's environment, so a seeded trace is
    the same whether or not an input is measured.
    """
    if input_size_bytes > RUN_INPUT_MAX_BYTES:
        raise InputTooLarge(
            input_size_bytes,
            f"the limit is {RUN_INPUT_MAX_BYTES} (a run's first snapshot holds it twice, "
            "in one NATS message)",
        )
    if input_size_bytes <= INPUT_MEASURED_FROM_BYTES:
        return
    out = first_dispatch(event, definition, lambda: PROBE_ID)
    if out is None or out.snapshot is None:
        return  # the engine decides the start; its own bound fails a run too large to save
    size = len(SnapshotEncoder().encode(out.snapshot))
    if size > SNAPSHOT_MAX_BYTES:
        tasks = len(out.effects)
        raise InputTooLarge(
            input_size_bytes,
            f"the run's first snapshot would be {size} bytes (the input once, and in each of "
            f"its {tasks} first tasks), over the {SNAPSHOT_MAX_BYTES} bytes one NATS message holds",
        )
