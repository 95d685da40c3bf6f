"""Which inputs a step's journal records as placed: the truth the repairs of a lost claim need.

A claim whose holder died before its ``input.placed`` record leaves the submission ``placed`` in
KV with nothing behind it. Telling that apart from a placement that was recorded (and whose
``done`` was lost) takes the journal, read here through the shared record decoder. Both cases are
rare (a crash in a window of one round trip), so a full read of the step's subject is affordable.
"""

from __future__ import annotations

from typing import Final

from dagnats_trio.protocol import InputPlacedRecord, decode_record
from dagnats_trio.transport import Transport, layout

#: Records asked for per read of the journal subject.
READ_PAGE_RECORDS: Final = 256


async def recorded_placements(transport: Transport, run_id: str, step_id: str) -> dict[str, int]:
    """``request_id -> iteration`` of every ``input.placed`` record of the step's journal."""
    subject = layout.journal_subject(run_id, step_id)
    found: dict[str, int] = {}
    seq = 1
    while True:
        page = await transport.read_subject(layout.JOURNAL_STREAM, subject, seq, READ_PAGE_RECORDS)
        for msg in page:
            record = decode_record(msg.data)
            if isinstance(record, InputPlacedRecord):
                found.setdefault(record.request_id, record.iteration)
        if len(page) < READ_PAGE_RECORDS:
            return found
        seq = page[-1].seq + 1
