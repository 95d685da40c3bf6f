"""Whether a run's input fits the run: refused before anything of the run is written.

A run's first snapshot holds its input once as the run's, and again in the task of each first
step that takes it (a service-dispatched start saves its tasks in the outbox). The snapshot must
fit one NATS message (``engine.snapshot_max_bytes`` of the ``max_payload`` the server
announces), so the input a run can take depends on its workflow and its server: found from
outside, two first steps and an input of 400 KiB (under the input bound) made a 1.2 MB snapshot
whose create failed, answered 500 after the run was indexed (a workflow's first start instead
stored the run and failed it, ``snapshot_too_large``). Every bound here is read from the
server's ``max_payload`` (``Transport.max_payload_bytes``), so a server configured smaller
refuses what it cannot store and one configured larger takes what it can.
"""

from __future__ import annotations

from typing import Final

from ..dag import WorkflowDef
from ..engine import SnapshotEncoder, first_dispatch, snapshot_max_bytes
from ..nats import DEFAULT_MAX_PAYLOAD_BYTES
from ..protocol import JsonValue, WorkflowStarted
from ._service_errors import InputTooLarge

#: Room kept in a run's first message for the rest of the run's state beside its input's two
#: copies (the definition, the steps, the ids): what :func:`run_input_max_bytes` leaves.
RUN_STATE_ROOM_BYTES: Final = 64 * 1024
#: How many copies of its input the snapshot of a run of one first step holds (the run's, and
#: its first task's).
INPUT_COPIES_MIN: Final = 2
#: An input at most this fraction of ``max_payload`` (64 KiB of the default 1 MiB) is not
#: measured against its run's first snapshot: even copied into each of the most first steps a
#: usual workflow has, it fits; a workflow with hundreds of first steps is still caught by the
#: engine's own bound (the run fails, ``snapshot_too_large``). Above it the snapshot is built
#: and encoded once more.
INPUT_UNMEASURED_SHARE_DIVISOR: Final = 16


def run_input_max_bytes(max_payload_bytes: int) -> int:
    """Largest run input (as encoded) a start takes on a server of ``max_payload_bytes``,
    whatever the workflow: the snapshot of a run of one first step holds it twice, beside
    :data:`RUN_STATE_ROOM_BYTES` of the rest (found from outside: an input of a million
    characters was 500)."""
    return (max_payload_bytes - RUN_STATE_ROOM_BYTES) // INPUT_COPIES_MIN


#: :func:`run_input_max_bytes` on a server of the default ``max_payload`` (1 MiB): 480 KiB.
RUN_INPUT_MAX_BYTES: Final = run_input_max_bytes(DEFAULT_MAX_PAYLOAD_BYTES)
#: The run id and nonces of the measured snapshot: as long as a real one (16 hex digits).
PROBE_ID: Final = "0" * 16
#: Its start time: a wall time in milliseconds has 13 digits until the year 2286.
PROBE_STARTED_AT_MS: Final = 10**12


def check_input_fits(
    definition: WorkflowDef,
    input: JsonValue,
    input_size_bytes: int,
    max_payload_bytes: int,
    idempotency_key: str | None = None,
) -> None:
    """Raise :class:`InputTooLarge` when ``input`` (``input_size_bytes`` encoded) is over
    :func:`run_input_max_bytes`, or the first snapshot of a run of ``definition`` taking it,
    dispatched as the service dispatches it (``engine.first_dispatch``), would be over
    ``engine.snapshot_max_bytes``, both of the server's ``max_payload_bytes``.

    Pure (no I/O), and nothing is built for an input of at most
    ``max_payload_bytes // INPUT_UNMEASURED_SHARE_DIVISOR`` (every start calls it). The
    measured run has probe ids and time of a real one's length, not ids drawn from the
    service's environment, so a seeded trace is the same whether or not an input is measured
    (the snapshot's header room absorbs the few bytes they may differ by).
    """
    input_max = run_input_max_bytes(max_payload_bytes)
    if input_size_bytes > input_max:
        raise InputTooLarge(
            input_size_bytes,
            f"the limit is {input_max} (a run's first snapshot holds it twice, "
            "in one NATS message)",
        )
    if input_size_bytes <= max_payload_bytes // INPUT_UNMEASURED_SHARE_DIVISOR:
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
    bound = snapshot_max_bytes(max_payload_bytes)
    if size > bound:
        tasks = len(out.effects)
        raise InputTooLarge(
            input_size_bytes,
            f"the run's first snapshot would be {size} bytes (the input once, and in each of "
            f"its {tasks} first tasks), over the {bound} bytes one NATS message holds",
        )
