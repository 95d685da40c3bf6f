"""What bridge routes read and write, as attrs classes (encoded by the protocol converter).

The OpenAPI document and docs/rest.md are generated from these, so they cannot drift from what
the routes do.
"""

from __future__ import annotations

from typing import Final, final

import attrs

from ..protocol import JsonValue, Replay
from ..protocol.schema_hints import int_range, non_empty
from ..worker import MAX_WAIT_MS

#: Latest ``until_ms`` accepted (the last millisecond of the year 9999).
MAX_UNTIL_MS: Final = 253_402_300_799_999

# --- request bodies --------------------------------------------------------------------------


@final
@attrs.frozen
class CompleteBody:
    """``output`` is the step's output (any JSON value)."""

    output: JsonValue = None


@final
@attrs.frozen
class FailBody:
    """``error`` says why the step failed (not blank); ``retriable`` false fails the step for
    good, true lets its retry policy decide."""

    error: str = attrs.field(metadata=non_empty())
    retriable: bool = True


@final
@attrs.frozen
class ContinueBody:
    """Ends an iteration of an agent loop. The wait fields ask the engine to wait before the
    next iteration (any mix, whichever comes first): ``delay_ms`` milliseconds after the engine
    enters the wait, ``until_ms`` epoch milliseconds, ``until_input`` until an input is
    submitted."""

    output: JsonValue = None
    delay_ms: int | None = attrs.field(default=None, metadata=int_range(0, MAX_WAIT_MS))
    until_ms: int | None = attrs.field(default=None, metadata=int_range(0, MAX_UNTIL_MS))
    until_input: bool = False


@final
@attrs.frozen
class PauseBody:
    """Park the step for ``duration_ms``; it comes back to the same iteration and attempt."""

    duration_ms: int = attrs.field(metadata=int_range(0, MAX_WAIT_MS))


@final
@attrs.frozen
class CheckpointBody:
    """``state`` is any JSON value: it rides the commit of a journal step (no cap), and goes to
    KV for other steps (capped by the step's ``loop_state_max_bytes``)."""

    state: JsonValue


@final
@attrs.frozen
class PlaceInputsBody:
    """``mode`` is ``steer`` or ``follow_up``."""

    mode: str


@final
@attrs.frozen
class JournalAppendBody:
    """A journal record in the wire format of docs/journal-wire-format.md without
    ``iteration``, ``attempt`` and ``claim_id`` (the bridge fills them): ``type`` is ``model``,
    ``tool.intent``, ``tool.output`` or ``tool.result``, with that kind's fields. A
    ``tool.intent`` without ``key`` gets ``{run}.{step}.{iteration}.{call}``.

    Every field a kind may send is listed here (the route decodes the body as the kind's record,
    which says which are required and refuses the others), so the document names each field a
    400 may name: ``call`` (every kind); ``response`` (model); ``name``, ``input``, ``replay``,
    ``key``, ``group``, ``group_size``, ``call_id`` (tool.intent); ``chunk`` (tool.output);
    ``output``, ``error``, ``interrupted``, ``partial``, ``cancelled_by`` (tool.result)."""

    type: str
    call: int | None = None
    response: JsonValue = None
    name: str | None = None
    input: JsonValue = None
    replay: Replay | None = None
    key: str | None = None
    group: int | None = None
    group_size: int | None = None
    call_id: str | None = None
    chunk: JsonValue = None
    output: JsonValue = None
    error: str | None = None
    interrupted: bool | None = None
    partial: list[JsonValue] | None = None
    cancelled_by: int | None = None


# --- responses -------------------------------------------------------------------------------


@final
@attrs.frozen
class LeaseView:
    """A leased task. Send ``token`` back on every lease route; heartbeat at least every
    ``ack_wait_ms`` or the lease expires and the task is redelivered."""

    token: str
    task_type: str
    run_id: str
    step_id: str
    workflow: str
    iteration: int
    attempt: int
    nonce: str
    input: JsonValue
    journal_seq: int | None
    is_loop: bool
    loop_state_max_bytes: int | None
    num_delivered: int
    ack_wait_ms: int


@final
@attrs.frozen
class HeartbeatView:
    """The lease is alive; ``claimed`` says whether it holds the journal's claim."""

    ack_wait_ms: int
    claimed: bool
    status: str = "ok"


@final
@attrs.frozen
class BridgeJournalEntry:
    """One record of the current iteration: its stream sequence and its wire form."""

    seq: int
    record: JsonValue


@final
@attrs.frozen
class ClaimedJournal:
    """The claim this lease holds (``claim_id``, and ``last_seq``, the tail it last saw) and the
    records of the current iteration, every attempt, in order (``truncated`` when there were
    more than the bridge returns at once)."""

    claim_id: str
    last_seq: int
    iteration: int
    attempt: int
    records: tuple[BridgeJournalEntry, ...]
    truncated: bool = False


@final
@attrs.frozen
class Appended:
    """The stream sequence the record was stored at (now the lease's ``last_seq``)."""

    seq: int


@final
@attrs.frozen
class CheckpointState:
    """The task's state and where it came from: ``journal`` (the commit at ``seq``),
    ``checkpoint`` (set by this lease, not yet committed), ``kv`` (a non-journal step's
    checkpoint) or ``input`` (nothing saved yet: ``state`` is the task's input)."""

    source: str
    state: JsonValue
    seq: int | None = None


@final
@attrs.frozen
class CheckpointSaved:
    """``stored`` is ``journal`` (rides the next commit) or ``kv``."""

    stored: str


@final
@attrs.frozen
class Settled:
    """The task is settled and acknowledged; ``journal_seq`` is the commit's sequence for a
    step that claimed its journal, else null."""

    action: str
    journal_seq: int | None = None


@final
@attrs.frozen
class PlacedInputView:
    request_id: str
    mode: str
    content: JsonValue
    iteration: int


@final
@attrs.frozen
class PlacedInputs:
    """Inputs placed in this iteration, in submission order, each once per lease."""

    inputs: tuple[PlacedInputView, ...]
