"""Test stand-ins for parts not wired yet: a run snapshot writer and a journal writer."""

from __future__ import annotations

import json
import secrets

import attrs

from dagnats_trio.protocol import (
    InputPlacedRecord,
    JournalRecord,
    decode_record,
    encode_record,
    layout,
    record_headers,
)
from dagnats_trio.transport import Transport

#: Bound on records a fake journal reads back; tests write a handful.
MAX_TEST_RECORDS = 1000


def new_run_id() -> str:
    return f"run-{secrets.token_hex(6)}"


async def write_snapshot(
    transport: Transport,
    run_id: str,
    steps: dict[str, str],
    status: str = "running",
) -> None:
    """What the engine will write at ``run.{run}`` (only the keys the inputs service reads, plus
    one it must ignore)."""
    snapshot = {
        "run_id": run_id,
        "status": status,
        "workflow": "agent-flow",
        "steps": {name: {"status": s, "iteration": 0} for name, s in steps.items()},
    }
    await transport.kv_put(
        layout.RUNS_BUCKET, layout.run_key(run_id), json.dumps(snapshot).encode()
    )


async def journal_records(transport: Transport, run_id: str, step_id: str) -> list[JournalRecord]:
    msgs = await transport.read_subject(
        layout.JOURNAL_STREAM, layout.journal_subject(run_id, step_id), 1, MAX_TEST_RECORDS
    )
    return [decode_record(m.data) for m in msgs]


@attrs.define
class FakeJournal:
    """A journal writer for one delivery: reads the tail when opened, appends fenced records."""

    transport: Transport
    run_id: str
    step_id: str
    iteration: int
    attempt: int
    claim_id: str
    last_seq: int = 0
    records: list[JournalRecord] = attrs.field(factory=list)

    @classmethod
    async def open(
        cls, transport: Transport, run_id: str, step_id: str, iteration: int, attempt: int = 1
    ) -> FakeJournal:
        subject = layout.journal_subject(run_id, step_id)
        msgs = await transport.read_subject(layout.JOURNAL_STREAM, subject, 1, MAX_TEST_RECORDS)
        journal = cls(
            transport,
            run_id,
            step_id,
            iteration,
            attempt,
            claim_id=f"claim-{secrets.token_hex(4)}",
            last_seq=msgs[-1].seq if msgs else 0,
            records=[decode_record(m.data) for m in msgs],
        )
        return journal

    def placed_inputs(self) -> list[InputPlacedRecord]:
        return [
            r
            for r in self.records
            if isinstance(r, InputPlacedRecord) and r.iteration == self.iteration
        ]

    async def append(self, record: JournalRecord) -> int:
        seq = await self.transport.publish(
            layout.journal_subject(self.run_id, self.step_id),
            encode_record(record),
            headers=record_headers(record),
            expected_last_subject_seq=self.last_seq,
        )
        self.last_seq = seq
        self.records.append(record)
        return seq
