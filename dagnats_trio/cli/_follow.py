"""``journal tail --follow``: print a step's records as they are written, until the step ends."""

from __future__ import annotations

from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from ..api import JournalEntry
from ._client import ApiClient
from ._common import console, echo_json
from ._journal import decode_entries, timeline
from ._render import timeline_cells
from ._watch import LIVE_REFRESH_PER_S


async def follow_journal(
    client: ApiClient, run_id: str, step_id: str, from_seq: int, as_json: bool
) -> int:
    out = console()
    seen: list[JournalEntry] = []
    status = Spinner("dots", text=f"following journal.{run_id}.{step_id} (Ctrl-C to stop)")
    live: Live | None = None
    if not as_json:
        live = Live(status, console=out, refresh_per_second=LIVE_REFRESH_PER_S, transient=True)
        live.start()
    try:
        async for item in client.follow_journal(run_id, step_id, from_seq):
            if item.entry is None:
                if not as_json:
                    out.print(
                        f"step {item.end_step_status}, run {item.end_run_status}: "
                        "the journal is complete"
                    )
                break
            seen.append(item.entry)
            if as_json:
                echo_json(item.entry)
                continue
            # Re-deriving the marks over everything seen keeps them right for the new row.
            records, problems = decode_entries(seen)
            if problems and problems[-1].seq == item.entry.seq:
                out.print(Text(str(problems[-1]), style="red"))
                continue
            row = timeline(records)[-1]
            table = Table.grid(padding=(0, 2))
            for _ in range(5):
                table.add_column()
            table.add_row(*timeline_cells(row))
            out.print(table)
    finally:
        if live is not None:
            live.stop()
    return 0


__all__ = ["follow_journal"]
