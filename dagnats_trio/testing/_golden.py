"""Golden-journal replay: run new handler code against a recorded journal, with no NATS.

A golden file is what ``dagnats journal export RUN STEP`` writes: a header line (the run, the
step and the run's input), then one journal entry per line in the REST reader's shape, decoded
by the one decoder every journal reader shares (``decode_entries``).

Every commit a handler wrote (each delivery that ended an iteration or paused it) is replayed:
the claim-time view of that delivery is planned by the journal's own rules (``plan_claim``), the
handler runs against a journal whose model and tool calls are answered from the records
(``decide_model`` / ``decide_tool``), and the commit it makes is compared with the recorded one.
Nothing runs for real: a call that the recording does not answer is a finding, not a request.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ..api._rest_views import JournalEntry
from ..cli._journal import decode_entries
from ..journal import MAX_RESTART_LIMIT, RESTART_LIMIT_REASON, ReplayMismatch, TaskIdentity
from ..journal._handle import ToolCall, ToolFn
from ..journal._replay import (
    Entry,
    ModelAction,
    PlanKind,
    RecordedModel,
    RecordedTool,
    ReplayView,
    ToolAction,
    ToolResult,
    canonical_json,
    decide_model,
    decide_tool,
    plan_claim,
)
from ..protocol import (
    CommitAction,
    CommitRecord,
    DecodeError,
    JsonValue,
    Replay,
    Wait,
    from_obj,
)
from ..worker import WaitArg, build_wait

#: The first line of a golden file says which format it is.
GOLDEN_FORMAT_VERSION: Final = 1
#: Bound on one replayed delivery: a handler that waits on something else never finishes here.
REPLAY_DELIVERY_TIMEOUT_S: Final = 30.0
#: Characters of a JSON value shown in one finding.
FINDING_VALUE_MAX_CHARS: Final = 120

Handler = Callable[[Any], Awaitable[None]]


class GoldenFormatError(ValueError):
    """A golden file that is not what ``dagnats journal export`` writes."""


@attrs.frozen
class GoldenHeader:
    golden: int
    run_id: str
    step_id: str
    input: JsonValue = None


@attrs.frozen
class Golden:
    """A recorded journal: its header and its records in sequence order."""

    header: GoldenHeader
    entries: tuple[Entry, ...]


def golden_lines(header: GoldenHeader, entries: Sequence[JournalEntry]) -> list[str]:
    """The lines of a golden file (what the export writes)."""
    from ..protocol import to_json

    return [to_json(header).decode(), *(to_json(e).decode() for e in entries)]


def parse_golden(text: str) -> Golden:
    """A golden file's text as records (raises :class:`GoldenFormatError` naming the line)."""
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if not lines:
        raise GoldenFormatError("line 1: the golden file is empty")
    parsed: list[tuple[int, Any]] = []
    for n, line in lines:
        try:
            parsed.append((n, json.loads(line)))
        except ValueError as exc:
            raise GoldenFormatError(f"line {n}: not JSON: {exc}") from None
    n0, raw_header = parsed[0]
    try:
        header: GoldenHeader = from_obj(raw_header, GoldenHeader, "golden header")
    except DecodeError as exc:
        raise GoldenFormatError(f"line {n0}: {exc}") from None
    if header.golden != GOLDEN_FORMAT_VERSION:
        raise GoldenFormatError(
            f"line {n0}: golden format {header.golden} is not {GOLDEN_FORMAT_VERSION}"
        )
    entries: list[JournalEntry] = []
    for n, raw in parsed[1:]:
        try:
            entries.append(from_obj(raw, JournalEntry, "journal entry"))
        except DecodeError as exc:
            raise GoldenFormatError(f"line {n}: {exc}") from None
    records, problems = decode_entries(entries)
    if problems:
        raise GoldenFormatError(problems[0])
    return Golden(header, tuple(records))


def load_golden(path: str | Path) -> Golden:
    return parse_golden(Path(path).read_text(encoding="utf-8"))


# --- findings ----------------------------------------------------------------------------------


@attrs.frozen
class Finding:
    """One difference between the recording and the new code, at a position of a delivery."""

    iteration: int
    attempt: int
    #: The call position (None for a finding about the commit).
    position: int | None
    kind: str
    recorded: str
    new: str

    def __str__(self) -> str:
        where = f"iteration {self.iteration} attempt {self.attempt}"
        if self.position is not None:
            where += f" position {self.position}"
        return f"{where}: {self.kind}: recorded {self.recorded}; new {self.new}"


@attrs.frozen
class GoldenReport:
    deliveries: int
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


def _short(value: JsonValue) -> str:
    try:
        text = canonical_json(value)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > FINDING_VALUE_MAX_CHARS:
        return text[: FINDING_VALUE_MAX_CHARS - 1] + "…"
    return text


def _describe_recorded(view: ReplayView, pos: int) -> str:
    rec = view.calls.get(pos)
    if isinstance(rec, RecordedModel):
        return f"model call -> {_short(rec.response)}"
    if isinstance(rec, RecordedTool):
        return (
            f"tool {rec.intent.name!r} {rec.intent.replay.value} input {_short(rec.intent.input)}"
        )
    return "no call"


class _Stopped(Exception):
    """The new code went where the recording cannot answer: its delivery stops here."""


# --- the journal and task context a replayed handler sees -------------------------------------


class GoldenJournal:
    """The journal of one replayed delivery: calls answered from the records, never run."""

    def __init__(self, delivery: _Delivery) -> None:
        self._d = delivery
        self._next_call = delivery.view.call_offset
        self._consumed: frozenset[int] = frozenset()
        self._state: JsonValue = delivery.base_state
        self.committed: CommitRecord | None = None

    @property
    def run_id(self) -> str:
        return self._d.task.run_id

    @property
    def step_id(self) -> str:
        return self._d.task.step_id

    @property
    def iteration(self) -> int:
        return self._d.task.iteration

    @property
    def attempt(self) -> int:
        return self._d.task.attempt

    @property
    def next_call(self) -> int:
        return self._next_call

    def _find(self, position: int | None, kind: str, recorded: str, new: str) -> _Stopped:
        t = self._d.task
        self._d.findings.append(Finding(t.iteration, t.attempt, position, kind, recorded, new))
        return _Stopped(kind)

    async def load_state(self) -> JsonValue:
        await trio.lowlevel.checkpoint()
        return self._state

    def set_state(self, state: JsonValue) -> None:
        canonical_json(state)
        self._state = state

    async def model(self, fn: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        await trio.lowlevel.checkpoint()
        pos = self._next_call
        decision = decide_model(self._d.view, pos)
        if decision.action is ModelAction.MISMATCH:
            raise self._find(
                pos, "ReplayMismatch", _describe_recorded(self._d.view, pos), "model call"
            )
        if decision.action is ModelAction.RUN:
            raise self._find(pos, "new call", "no call", "model call")
        self._next_call = pos + 1
        return decision.response

    async def tool(self, call: ToolCall, replay: Replay, fn: ToolFn) -> ToolResult:
        await trio.lowlevel.checkpoint()
        pos = self._next_call
        input_json = canonical_json(call.input)
        new = f"tool {call.name!r} {replay.value} input {_short(call.input)}"
        decision, consumed = decide_tool(
            self._d.view, self._consumed, pos, call.name, input_json, replay
        )
        if decision.action is ToolAction.MISMATCH:
            raise self._find(pos, "ReplayMismatch", _describe_recorded(self._d.view, pos), new)
        if decision.action is not ToolAction.REUSE or decision.result is None:
            raise self._find(pos, "new call", _describe_recorded(self._d.view, pos), new)
        self._consumed = consumed
        self._next_call = pos + 1
        return decision.result

    async def tool_output(self, chunk: JsonValue) -> None:
        await trio.lowlevel.checkpoint()

    def placed_inputs(self) -> list[Any]:
        return list(self._d.view.placed)

    async def settle(
        self,
        action: CommitAction,
        *,
        output: JsonValue = None,
        wait: Wait | None = None,
        error: str | None = None,
        retriable: bool = True,
        reason: str | None = None,
        pause_ms: int | None = None,
    ) -> int:
        await trio.lowlevel.checkpoint()
        t = self._d.task
        self.committed = CommitRecord(
            t.iteration,
            t.attempt,
            "",
            t.nonce,
            action,
            state=self._state,
            output=output,
            wait=wait,
            error=error,
            retriable=retriable,
            reason=reason,
            pause_ms=pause_ms,
        )
        return 0


class GoldenContext:
    """What a replayed handler sees as its ``tc``: the TaskContext calls a handler makes, the
    journal answered from the records."""

    def __init__(self, delivery: _Delivery) -> None:
        self._d = delivery
        self._journal = GoldenJournal(delivery)

    @property
    def input(self) -> JsonValue:
        return self._d.input

    @property
    def run_id(self) -> str:
        return self._d.task.run_id

    @property
    def step_id(self) -> str:
        return self._d.task.step_id

    @property
    def iteration(self) -> int:
        return self._d.task.iteration

    @property
    def attempt(self) -> int:
        return self._d.task.attempt

    @property
    def num_delivered(self) -> int:
        return 1

    @property
    def worker_id(self) -> str:
        return "golden-replay"

    @property
    def settled(self) -> bool:
        return self._journal.committed is not None

    def key(self, *parts: str | int) -> str:
        base = f"{self.run_id}.{self.step_id}.{self.iteration}"
        return ".".join([base, *(str(p) for p in parts)])

    async def journal(self) -> GoldenJournal:
        await trio.lowlevel.checkpoint()
        return self._journal

    async def checkpoint(self, state: JsonValue) -> None:
        await trio.lowlevel.checkpoint()
        self._journal.set_state(state)

    async def load_checkpoint(self) -> JsonValue:
        return await self._journal.load_state()

    async def heartbeat(self) -> None:
        await trio.lowlevel.checkpoint()

    async def put_stream(self, data: bytes | str) -> None:
        await trio.lowlevel.checkpoint()

    async def complete(self, output: JsonValue = None) -> None:
        await self._journal.settle(CommitAction.COMPLETE, output=output)

    async def fail(self, error: str | BaseException) -> None:
        await self._journal.settle(CommitAction.FAIL, error=_error_text(error))

    async def fail_permanent(self, error: str | BaseException) -> None:
        await self._journal.settle(CommitAction.FAIL, error=_error_text(error), retriable=False)

    async def continue_(self, output: JsonValue = None, wait: WaitArg = None) -> None:
        await self._journal.settle(CommitAction.CONTINUE, output=output, wait=build_wait(wait))

    async def pause(self, duration_s: float) -> None:
        await self._journal.settle(CommitAction.PAUSE, pause_ms=round(duration_s * 1000))


def _error_text(error: str | BaseException) -> str:
    if isinstance(error, BaseException):
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return str(error)


# --- the runner ------------------------------------------------------------------------------


@attrs.define
class _Delivery:
    task: TaskIdentity
    view: ReplayView
    base_state: JsonValue
    input: JsonValue
    findings: list[Finding]


#: Fields of a commit the handler decides (claim ids and nonces differ by construction).
_COMPARED_FIELDS: Final = ("action", "state", "output", "wait", "error", "retriable", "pause_ms")


def _commit_changes(recorded: CommitRecord, new: CommitRecord) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    from ..protocol import to_json

    for name in _COMPARED_FIELDS:
        a, b = getattr(recorded, name), getattr(new, name)
        ja = json.loads(to_json(a)) if a is not None else None
        jb = json.loads(to_json(b)) if b is not None else None
        if ja != jb:
            out.append((name, _short(ja), _short(jb)))
    return out


def _deliveries(golden: Golden, input: JsonValue) -> list[tuple[_Delivery, CommitRecord]]:
    """Each delivery whose handler wrote a commit, with the view it had when it claimed."""
    h = golden.header
    out: list[tuple[_Delivery, CommitRecord]] = []
    entries = list(golden.entries)
    for idx, (_, rec) in enumerate(entries):
        if not isinstance(rec, CommitRecord) or rec.reason == RESTART_LIMIT_REASON:
            continue
        task = TaskIdentity(h.run_id, h.step_id, rec.iteration, rec.attempt, rec.nonce)
        plan = plan_claim(entries[:idx], task, MAX_RESTART_LIMIT, full=True)
        if plan.kind is not PlanKind.PROCEED or plan.view is None:
            continue  # an adopted or republished commit: no handler of its own wrote it
        base = plan.view.base
        state = base[1].state if base is not None and isinstance(base[1], CommitRecord) else None
        out.append((_Delivery(task, plan.view, state, input, []), rec))
    return out


async def replay_golden(
    golden: Golden | str | Path,
    handler: Handler,
    *,
    input: JsonValue = attrs.NOTHING,
) -> GoldenReport:
    """Run ``handler`` against every recorded delivery of ``golden``; report each difference.

    ``input`` overrides the header's (the run's input) for a step that reads another input.
    Model and tool calls are answered from the records; a different call at a position
    (``ReplayMismatch``), a call the recording does not have, a recorded call the new code no
    longer makes, and a commit with other contents are findings. Nothing runs for real.
    """
    if not isinstance(golden, Golden):
        golden = load_golden(golden)
    task_input = golden.header.input if input is attrs.NOTHING else input
    findings: list[Finding] = []
    deliveries = _deliveries(golden, task_input)
    for delivery, recorded in deliveries:
        tc = GoldenContext(delivery)
        t = delivery.task
        try:
            with trio.fail_after(REPLAY_DELIVERY_TIMEOUT_S):
                await handler(tc)
        except _Stopped:
            findings.extend(delivery.findings)
            continue
        except ReplayMismatch as exc:
            delivery.findings.append(
                Finding(t.iteration, t.attempt, None, "ReplayMismatch", "", str(exc))
            )
        except trio.TooSlowError:
            delivery.findings.append(
                Finding(
                    t.iteration,
                    t.attempt,
                    None,
                    "timeout",
                    "a commit",
                    f"no commit within {REPLAY_DELIVERY_TIMEOUT_S} s",
                )
            )
        except Exception as exc:
            if tc.settled:
                raise
            await tc.fail(exc)
        findings.extend(delivery.findings)
        if delivery.findings:
            continue
        journal = tc._journal
        view = delivery.view
        for pos in sorted(p for p in view.calls if p >= journal.next_call):
            findings.append(
                Finding(
                    t.iteration,
                    t.attempt,
                    pos,
                    "call not made",
                    _describe_recorded(view, pos),
                    "no call",
                )
            )
        new = journal.committed
        if new is None:
            findings.append(
                Finding(
                    t.iteration,
                    t.attempt,
                    None,
                    "no commit",
                    recorded.action.value,
                    "the handler returned without settling",
                )
            )
            continue
        for name, a, b in _commit_changes(recorded, new):
            findings.append(Finding(t.iteration, t.attempt, None, f"changed commit {name}", a, b))
    return GoldenReport(len(deliveries), tuple(findings))
