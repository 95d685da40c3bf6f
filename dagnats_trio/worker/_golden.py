"""Golden-journal replay: run new handler code against a recorded journal, with no NATS.

A golden file is what ``dagnats journal export RUN STEP`` writes: a header line (the run, the
step and the run's input), then one journal entry per line in the REST reader's shape
(``seq``, ``type``, ``record``, ``error``); each record decodes through the protocol converter,
the decoder every journal reader shares.

Each delivery that wrote a commit is replayed in journal order: the journal plans the view it
had when it claimed and answers its calls from the records (``journal.GoldenJournal``); the
handler runs with a :class:`GoldenContext` as its ``tc``, and the commit it makes is compared
with the recorded one. Nothing runs for real.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, final

import attrs
import trio

from dagnats_trio.journal import (
    Finding,
    GoldenDelivery,
    GoldenJournal,
    ReplayMismatch,
    ReplayStopped,
    commit_changes,
    golden_deliveries,
)
from dagnats_trio.protocol import (
    CommitAction,
    DecodeError,
    JournalRecord,
    JsonValue,
    from_obj,
)

from ._context import error_text, iteration_key
from ._waits import WaitArg, build_wait

#: The first line of a golden file says which format it is.
GOLDEN_FORMAT_VERSION: Final = 1
#: Bound on one replayed delivery: a handler that waits on something else never finishes here.
REPLAY_DELIVERY_TIMEOUT_S: Final = 30.0

GoldenHandler = Callable[[Any], Awaitable[None]]


@final
class GoldenFormatError(ValueError):
    """A golden file that is not what ``dagnats journal export`` writes (names the line)."""


@final
@attrs.frozen
class GoldenHeader:
    golden: int
    run_id: str
    step_id: str
    input: JsonValue = None


@final
@attrs.frozen
class GoldenEntry:
    """One record line: the REST reader's ``JournalEntry`` shape (a test keeps them equal)."""

    seq: int
    type: str
    record: JsonValue
    error: str | None = None
    #: ``k/n`` for a record stored in an atomic batch (None: stored alone or in a record group,
    #: which shares its ``seq`` with the group's other records, or an older file).
    batch: str | None = None


@final
@attrs.frozen
class Golden:
    """A recorded journal: its header and its records in sequence order."""

    header: GoldenHeader
    entries: tuple[tuple[int, JournalRecord], ...]


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
    records: list[tuple[int, JournalRecord]] = []
    for n, raw in parsed[1:]:
        try:
            entry: GoldenEntry = from_obj(raw, GoldenEntry, "journal entry")
            if entry.record is None:
                raise DecodeError(f"seq {entry.seq}: record does not decode: {entry.error}")
            record: JournalRecord = from_obj(entry.record, JournalRecord, "journal record")
        except DecodeError as exc:
            raise GoldenFormatError(f"line {n}: {exc}") from None
        records.append((entry.seq, record))
    return Golden(header, tuple(records))


def load_golden(path: str | Path) -> Golden:
    return parse_golden(Path(path).read_text(encoding="utf-8"))


@final
@attrs.frozen
class GoldenReport:
    deliveries: int
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not self.findings


@final
class GoldenContext:
    """What a replayed handler sees as its ``tc``: the TaskContext calls a handler makes, the
    journal answered from the records."""

    def __init__(self, delivery: GoldenDelivery, task_input: JsonValue) -> None:
        self._d = delivery
        self._input = task_input
        self.golden_journal = GoldenJournal(delivery)

    @property
    def input(self) -> JsonValue:
        return self._input

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
        return self.golden_journal.committed is not None

    def key(self, *parts: str | int) -> str:
        return iteration_key(self.run_id, self.step_id, self.iteration, *parts)

    async def journal(self) -> GoldenJournal:
        await trio.lowlevel.checkpoint()
        return self.golden_journal

    async def checkpoint(self, state: JsonValue) -> None:
        await trio.lowlevel.checkpoint()
        self.golden_journal.set_state(state)

    async def load_checkpoint(self) -> JsonValue:
        return await self.golden_journal.load_state()

    async def heartbeat(self) -> None:
        await trio.lowlevel.checkpoint()

    async def put_stream(self, data: bytes | str) -> None:
        await trio.lowlevel.checkpoint()

    async def complete(self, output: JsonValue = None) -> None:
        await self.golden_journal.settle(CommitAction.COMPLETE, output=output)

    async def fail(self, error: str | BaseException) -> None:
        await self.golden_journal.settle(CommitAction.FAIL, error=error_text(error))

    async def fail_permanent(self, error: str | BaseException) -> None:
        await self.golden_journal.settle(
            CommitAction.FAIL, error=error_text(error), retriable=False
        )

    async def continue_(self, output: JsonValue = None, wait: WaitArg = None) -> None:
        await self.golden_journal.settle(
            CommitAction.CONTINUE, output=output, wait=build_wait(wait)
        )

    async def pause(self, duration_s: float) -> None:
        await self.golden_journal.settle(CommitAction.PAUSE, pause_ms=round(duration_s * 1000))


_NO_INPUT: Any = object()


async def _replay_one(
    delivery: GoldenDelivery, handler: GoldenHandler, task_input: JsonValue
) -> list[Finding]:
    tc = GoldenContext(delivery, task_input)
    j = tc.golden_journal
    t = delivery.task
    try:
        with trio.fail_after(REPLAY_DELIVERY_TIMEOUT_S):
            await handler(tc)
    except ReplayStopped:
        return j.findings
    except ReplayMismatch as exc:
        return [Finding(t.iteration, t.attempt, None, "ReplayMismatch", "", str(exc))]
    except trio.TooSlowError:
        return [
            Finding(
                t.iteration,
                t.attempt,
                None,
                "timeout",
                "a commit",
                f"no commit within {REPLAY_DELIVERY_TIMEOUT_S} s",
            )
        ]
    except Exception as exc:
        if tc.settled:
            raise
        await tc.fail(exc)  # what the worker does with a handler's exception
    findings = [*j.findings, *j.unmade_calls()]
    if findings:
        return findings
    if j.committed is None:
        return [
            Finding(
                t.iteration,
                t.attempt,
                None,
                "no commit",
                delivery.commit.action.value,
                "the handler returned without settling",
            )
        ]
    return [
        Finding(t.iteration, t.attempt, None, f"changed commit {name}", a, b)
        for name, a, b in commit_changes(delivery.commit, j.committed)
    ]


async def replay_golden(
    golden: Golden | str | Path,
    handler: GoldenHandler,
    *,
    input: JsonValue = _NO_INPUT,
) -> GoldenReport:
    """Run ``handler`` against every recorded delivery of ``golden``; report each difference.

    ``input`` overrides the header's (the run's input) for a step that reads another input.
    Findings: a different call at a position (``ReplayMismatch``), a call the recording does
    not have (``new call``), a recorded call the new code no longer makes (``call not made``),
    and a commit with other contents (``changed commit FIELD``).
    """
    if not isinstance(golden, Golden):
        golden = load_golden(golden)
    task_input = golden.header.input if input is _NO_INPUT else input
    deliveries = golden_deliveries(golden.entries, golden.header.run_id, golden.header.step_id)
    findings: list[Finding] = []
    for delivery in deliveries:
        findings.extend(await _replay_one(delivery, handler, task_input))
    return GoldenReport(len(deliveries), tuple(findings))
