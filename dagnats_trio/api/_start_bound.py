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
from ..protocol import JsonValue, WorkflowStarted
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
#: Its start time: a wall time in milliseconds has 13 digits until the year 2286.
PROBE_STARTED_AT_MS: Final = 10**12


def check_input_fits(
    definition: WorkflowDef,
    input: JsonValue,
    input_size_bytes: int,
    idempotency_key: str | None = None,
) -> None:
    """Raise :class:`InputTooLarge` when ``input`` (``input_size_bytes`` encoded) is over
    :data:`RUN_INPUT_MAX_BYTES`, or the first snapshot of a run of ``definition`` taking it,
    dispatched as the service dispatches it (``engine.first_dispatch``), would be over
    ``SNAPSHOT_MAX_BYTES``.

    Pure (no I/O), and nothing is built for an input under :data:`INPUT_MEASURED_FROM_BYTES`
    (every start calls it). The measured run has probe ids and time of a real one's length,
    not ids drawn from the service's environment, so a seeded trace is the same whether or not
    an input is measured (the snapshot's header room absorbs the few bytes they may differ by).
    """
    if input_size_bytes > RUN_INPUT_MAX_BYTES:
        raise InputTooLarge(
            input_size_bytes,
            f"the limit is {RUN_INPUT_MAX_BYTES} (a run's first snapshot holds it twice, "
            "in one NATS message)",
        )
    if input_size_bytes <= INPUT_MEASURED_FROM_BYTES:
        return
    event = WorkflowStarted(
        run_id=PROBE_ID,
        workflow=definition.name,
        input=input,
        idempotency_key=idempotency_key,
        started_at_ms=PROBE_STARTED_AT_MS,
    )
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
