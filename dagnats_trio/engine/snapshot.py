"""The run snapshot: the engine's whole state of one run, stored in KV ``workflow_runs`` at
``run.{run}`` and written only with compare-and-set.

``run_id`` and ``status`` are top-level so a worker can decode :class:`protocol.RunHeader` from
the same bytes. ``outbox`` keeps the last few applied events, keyed by their history stream
sequence, so a crash between saving and publishing is repaired by re-executing their effects
when the unacknowledged event comes again (every effect is idempotent). An entry keeps its
effects only until the engine that saved it has stored them (:func:`stored_outbox`): then its
sequence alone still answers a redelivery (replayed, nothing to do), and the snapshot written
on every event stays the size of one event's effects instead of growing with the last eight
(with ``sync_interval: always`` a write costs ~30 us more per KB, all of it in the fsync).
"""

from __future__ import annotations

import enum
import hashlib
from typing import final

import attrs
from cattrs.gen import make_dict_unstructure_fn, override

from ..dag import WorkflowDef
from ..protocol import (
    TAG_FIELD,
    DispatchId,
    JsonValue,
    ParentRef,
    RunStatus,
    TaskMessage,
    Wait,
    converter,
    dumps_json,
    from_json,
)
from ._text_memo import OUTBOX_JSON_MEMO_MAX_CHARS as OUTBOX_JSON_MEMO_MAX_CHARS
from ._text_memo import OUTBOX_JSON_MEMO_MAX_ENTRIES as OUTBOX_JSON_MEMO_MAX_ENTRIES
from ._text_memo import TextMemo
from .effects import Effect, PublishTask

#: How many applied events keep their effects in the outbox.
OUTBOX_KEEP_EVENTS = 8


class StepStatus(enum.Enum):
    PENDING = "pending"
    #: Dispatched: a task (or a child run) is out and its lifecycle event is awaited.
    RUNNING = "running"
    #: Parked by the engine (see :class:`Park`); no task is out.
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED)


class Park(enum.Enum):
    """Why a waiting step waits, and so what its wake-up dispatches next."""

    RETRY = "retry"  # same iteration, next attempt
    LOOP_DELAY = "loop_delay"  # next iteration
    WAIT = "wait"  # next iteration (durable wait from step.continue)
    PAUSE = "pause"  # same iteration, same attempt, new nonce


@final
@attrs.frozen
class StepState:
    """One step of a run.

    ``dispatch`` is the current dispatch; while the step waits it is the dispatch that ended, and
    the timers armed for it carry it. ``journal_seq`` is from the event that ended the previous
    iteration. ``error`` and ``reason`` keep the last failure even when a retry then succeeds.
    """

    step_id: str
    status: StepStatus = StepStatus.PENDING
    dispatch: DispatchId | None = None
    park: Park | None = None
    wait: Wait | None = None
    wake_at_ms: int | None = None
    output: JsonValue = None
    error: str | None = None
    reason: str | None = None
    journal_seq: int | None = None
    iterations: int = 0
    child_run_id: str | None = None
    started_at_ms: int | None = None
    dispatched_at_ms: int | None = None
    finished_at_ms: int | None = None


@final
@attrs.frozen
class OutboxEntry:
    """An applied event (its history stream sequence) and the effects still to be repeated if
    it comes again: none once they are known stored."""

    seq: int
    effects: tuple[Effect, ...] = ()


def stored_outbox(outbox: tuple[OutboxEntry, ...]) -> tuple[OutboxEntry, ...]:
    """``outbox`` once the effects of its newest entry are stored: that entry keeps its
    sequence, without effects. Only the newest: an older entry read from the store may hold the
    effects of an engine that crashed before storing them, which its event's redelivery must
    still repeat."""
    if not outbox or not outbox[-1].effects:
        return outbox
    return (*outbox[:-1], OutboxEntry(outbox[-1].seq))


@final
@attrs.frozen
class RunSnapshot:
    """A run. ``started`` turns true when the engine applied ``workflow.started`` (the service
    writes the snapshot first, so a run is readable the moment ``start_run`` returns).
    ``timers_armed`` turns true with the first timer the run arms and stays true: the run's end
    then purges its timers (``engine._run_end``), a run that never armed one skips that request."""

    run_id: str
    status: RunStatus
    workflow: str
    definition: WorkflowDef | None = None
    #: Where the definition is stored once for every run of it (:func:`definition_ref`): a
    #: snapshot the engine saves names it there instead of holding it (``encode_snapshot``'s
    #: ``definition_by_ref``); decoded, such a snapshot has no ``definition`` until its reader
    #: resolves the reference (``engine.DefinitionRefs``).
    definition_ref: str | None = None
    input: JsonValue = None
    output: JsonValue = None
    error: str | None = None
    failed_step: str | None = None
    parent: ParentRef | None = None
    idempotency_key: str | None = None
    started: bool = False
    created_at_ms: int = 0
    updated_at_ms: int = 0
    finished_at_ms: int | None = None
    timers_armed: bool = False
    steps: dict[str, StepState] = attrs.field(factory=dict)
    last_seq: int = 0
    outbox: tuple[OutboxEntry, ...] = ()

    def step(self, step_id: str) -> StepState:
        return self.steps[step_id]

    def outputs(self) -> dict[str, JsonValue]:
        return {
            sid: st.output for sid, st in self.steps.items() if st.status is StepStatus.COMPLETED
        }


# A field at its default is left out of the stored snapshot (decoding puts the default back):
# most of a step's and a run's fields are None until something happens to them, and every
# byte of a save is paid again in its fsync. A step's ``status`` is always written: the
# inputs service's view of a snapshot (``inputs._snapshot``) needs it. The run's definition
# and the task messages of the outbox are written whole (a definition's defaults may change
# between releases; a run keeps the definition it started with).
_unstructure_step = make_dict_unstructure_fn(
    StepState, converter, _cattrs_omit_if_default=True, status=override(omit_if_default=False)
)
converter.register_unstructure_hook(StepState, _unstructure_step)
_unstructure_outbox_entry = make_dict_unstructure_fn(
    OutboxEntry, converter, _cattrs_omit_if_default=True
)
#: A snapshot's own fields: ``definition`` (or its reference) and ``outbox`` are spliced in as
#: memoised texts.
_unstructure_rest = make_dict_unstructure_fn(
    RunSnapshot,
    converter,
    _cattrs_omit_if_default=True,
    definition=override(omit=True),
    definition_ref=override(omit=True),
    outbox=override(omit=True),
)
#: The fields stored before ``definition``, in field order (the bytes keep the field order).
_BEFORE_DEFINITION = ("run_id", "status", "workflow")
_FIELD_NAMES = tuple(f.name for f in attrs.fields(RunSnapshot))
if (
    _FIELD_NAMES[:5] != (*_BEFORE_DEFINITION, "definition", "definition_ref")
    or _FIELD_NAMES[-1] != "outbox"
):
    raise RuntimeError(f"encode_snapshot splices by field order; RunSnapshot has {_FIELD_NAMES}")


converter.register_unstructure_hook(OutboxEntry, _unstructure_outbox_entry)
# ``to_json(snapshot)`` is ``encode_snapshot(snapshot)``: one encoding, fields at their
# defaults left out.
converter.register_unstructure_hook(
    RunSnapshot, make_dict_unstructure_fn(RunSnapshot, converter, _cattrs_omit_if_default=True)
)

#: The spliced outbox entry's parts (``SnapshotEncoder._outbox_text``), in the field order the
#: converter writes them: an entry's sequence, then its effects when it has any; a task
#: effect's task, then its msg id, then its tag (written last, as ``register_union`` does).
_ENTRY_FIELDS = tuple(f.name for f in attrs.fields(OutboxEntry))
_PUBLISH_TASK_FIELDS = tuple(f.name for f in attrs.fields(PublishTask))
if _ENTRY_FIELDS != ("seq", "effects") or _PUBLISH_TASK_FIELDS != ("task", "msg_id"):
    raise RuntimeError(
        f"the outbox splices by field order; OutboxEntry has {_ENTRY_FIELDS}, "
        f"PublishTask {_PUBLISH_TASK_FIELDS}"
    )
_PUBLISH_TASK_TAIL = f',"{TAG_FIELD}":{dumps_json(PublishTask.TYPE)}}}'
_unstructure_effect = converter.get_unstructure_hook(Effect)
_unstructure_task = converter.get_unstructure_hook(TaskMessage)


@final
@attrs.define
class _DefinitionText:
    """A definition (held, so its ``id`` is not reused while this lives), its JSON text, and
    its reference once asked for."""

    definition: WorkflowDef
    text: str
    ref: str | None = None


@final
class SnapshotEncoder:
    """Encodes snapshots (:meth:`encode`), spelling once the parts that rarely change from one
    save to the next: a run's snapshots all hold the one definition object the run started
    with (``_replace.replace`` keeps it; an engine derives every run of a kept definition from
    one object), and a save carries the last ``OUTBOX_KEEP_EVENTS`` outbox entries of the one
    before unchanged (the same frozen objects). So each is turned into JSON text once, by
    identity, and the definition hashed once (:meth:`definition_ref`). A dispatch's task is
    spelled once for the outbox entry that holds it and for its publish (:meth:`task_bytes`),
    which follows the save.

    The memos are this instance's, bounded by :data:`OUTBOX_JSON_MEMO_MAX_ENTRIES` each: one
    encoder per owner that encodes the same runs again (an engine, ``EngineState``), none per
    process (the library keeps no global state). A memo holds its objects beside their texts,
    so an ``id`` is not reused while its slot lives.
    """

    __slots__ = ("_definitions", "_outbox", "_tasks")

    def __init__(self) -> None:
        self._outbox: TextMemo[OutboxEntry, str] = TextMemo()
        self._definitions: TextMemo[WorkflowDef, _DefinitionText] = TextMemo()
        #: A dispatch's task, spelled once for its outbox entry and its publish (``task_bytes``).
        self._tasks: TextMemo[PublishTask, str] = TextMemo()

    def encode(self, snapshot: RunSnapshot, *, definition_by_ref: bool = False) -> bytes:
        """The same bytes as ``to_json(snapshot)``, put together from the snapshot's own fields
        and the memoised texts of its definition and outbox entries.

        ``definition_by_ref``: the definition is written as its reference alone
        (:meth:`definition_ref`, 84 bytes instead of the scripted agent's ~370); only for a
        caller that has stored it under that reference first (``engine.DefinitionRefs.store``).
        """
        rest = _unstructure_rest(snapshot)
        definition, ref = snapshot.definition, snapshot.definition_ref
        if definition is not None and definition_by_ref:
            # The engine's saves: the reference is a value like the others, so the run's own
            # fields are one dict in field order and one encoding (the inline definition is
            # spliced in as its memoised text, which needs the fields before it apart).
            body = {name: rest.pop(name) for name in _BEFORE_DEFINITION}
            body["definition_ref"] = self.definition_ref(definition)
            body.update(rest)
            parts = [dumps_json(body)[:-1]]
        else:
            head = {name: rest.pop(name) for name in _BEFORE_DEFINITION}
            parts = [dumps_json(head)[:-1]]
            if definition is not None:
                parts.append(f',"definition":{self._definition(definition).text}')
            if ref is not None:
                parts.append(f',"definition_ref":{dumps_json(ref)}')
            if rest:
                parts.append(f",{dumps_json(rest)[1:-1]}")
        if snapshot.outbox:
            parts.append(',"outbox":[')
            parts.append(",".join([self._outbox_text(entry) for entry in snapshot.outbox]))
            parts.append("]")
        parts.append("}")
        return "".join(parts).encode()

    def definition_bytes(self, definition: WorkflowDef) -> bytes:
        """What is stored under :meth:`definition_ref`: the definition as a snapshot holds it
        inline (every field, defaults included: a run keeps the definition it started with,
        even when a later release changes a default)."""
        return self._definition(definition).text.encode()

    def definition_ref(self, definition: WorkflowDef) -> str:
        """The definition's content address: the SHA-256 (hex) of :meth:`definition_bytes`.
        Two definitions have one reference only if they are the same bytes, so what is stored
        under it never changes: a definition registered again under its name is another
        reference, and a run that names the old one keeps running it."""
        slot = self._definition(definition)
        ref = slot.ref
        if ref is None:
            ref = slot.ref = hashlib.sha256(slot.text.encode()).hexdigest()
        return ref

    def task_bytes(self, effect: PublishTask) -> bytes:
        """The bytes the task of ``effect`` is published as (``encode_task``): spelled once
        with the outbox entry that holds it when that entry was saved first, as the engine saves
        a dispatch before it publishes the task."""
        return self._task_text(effect).encode()

    def _task_text(self, effect: PublishTask) -> str:
        text = self._tasks.get(effect)
        if text is None:
            text = dumps_json(_unstructure_task(effect.task))
            self._tasks.put(effect, text, len(text))
        return text

    def _outbox_text(self, entry: OutboxEntry) -> str:
        text = self._outbox.get(entry)
        if text is None:
            text = self._spell_entry(entry)
            self._outbox.put(entry, text, len(text))
        return text

    def _spell_entry(self, entry: OutboxEntry) -> str:
        """The converter's text of ``entry``, a task effect's task taken from (and left in)
        the task memo. A sequence is an ``int``, whose JSON is its decimal digits."""
        if not entry.effects:
            return f'{{"seq":{entry.seq:d}}}'
        effects = [
            f'{{"task":{self._task_text(e)},"msg_id":{dumps_json(e.msg_id)}{_PUBLISH_TASK_TAIL}'
            if type(e) is PublishTask
            else dumps_json(_unstructure_effect(e))
            for e in entry.effects
        ]
        return f'{{"seq":{entry.seq:d},"effects":[{",".join(effects)}]}}'

    def _definition(self, definition: WorkflowDef) -> _DefinitionText:
        slot = self._definitions.get(definition)
        if slot is None:
            slot = _DefinitionText(definition, dumps_json(converter.unstructure(definition)))
            self._definitions.put(definition, slot, len(slot.text))
        return slot


def encode_snapshot(snapshot: RunSnapshot, *, definition_by_ref: bool = False) -> bytes:
    """:meth:`SnapshotEncoder.encode` with nothing remembered, for a caller that encodes a run
    once (a start, a tool); an owner that saves the same runs again keeps an encoder."""
    return SnapshotEncoder().encode(snapshot, definition_by_ref=definition_by_ref)


def definition_bytes(definition: WorkflowDef) -> bytes:
    """:meth:`SnapshotEncoder.definition_bytes`, nothing remembered."""
    return SnapshotEncoder().definition_bytes(definition)


def definition_ref(definition: WorkflowDef) -> str:
    """:meth:`SnapshotEncoder.definition_ref`, nothing remembered."""
    return SnapshotEncoder().definition_ref(definition)


def decode_snapshot(data: bytes) -> RunSnapshot:
    """Raises :class:`protocol.DecodeError` on anything that is not a snapshot."""
    return from_json(data, RunSnapshot, "run snapshot")
