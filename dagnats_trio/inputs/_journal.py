"""What a step's journal records about its placements: the truth settlement and the repairs of a
lost claim need.

A claim whose holder died before its ``input.placed`` record leaves the submission ``placed`` in
KV with nothing behind it; a ``done`` can be lost after the commit. Telling these apart takes the
journal, read here through the shared record decoder and folded by the pure
:func:`~._settlement.journal_placements`. Only the repairs and the settlement of a finished step
read it, so a full read of the step's subject is affordable.
"""

from __future__ import annotations

from typing import Final

from dagnats_trio.protocol import JournalRecord, decode_records, layout
from dagnats_trio.transport import Transport

from ._settlement import JournalPlacements, journal_placements

#: Records asked for per read of the journal subject.
READ_PAGE_RECORDS: Final = 256


async def read_placements(transport: Transport, run_id: str, step_id: str) -> JournalPlacements:
    """The placements of the step's journal, recorded and committed."""
    subject = layout.journal_subject(run_id, step_id)
    records: list[JournalRecord] = []
    seq = 1
    while True:
        page = await transport.read_subject(layout.JOURNAL_STREAM, subject, seq, READ_PAGE_RECORDS)
        records.extend(rec for msg in page for rec in decode_records(msg.data))
        if len(page) < READ_PAGE_RECORDS:
            return journal_placements(records)
        seq = page[-1].seq + 1
