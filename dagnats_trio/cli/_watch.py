"""``run start --watch``: follow a run until it ends, live on a terminal, a line a change when
piped, one JSON document at the end with ``--json``."""

from __future__ import annotations

from typing import Final

import trio
import typer
from rich.live import Live

from ..api import RunView
from ..protocol import RunStatus
from ._client import ApiClient
from ._common import console, echo_json
from ._render import run_renderable

#: How often ``run start --watch`` looks at the run.
WATCH_INTERVAL_S: Final = 0.5
#: Live view refreshes per second.
LIVE_REFRESH_PER_S: Final = 4


def run_exit_code(run: RunView) -> int:
    """1 for a run that failed or was cancelled, else 0."""
    return 0 if run.status is not RunStatus.FAILED and run.status is not RunStatus.CANCELLED else 1


async def watch_run(client: ApiClient, run_id: str, as_json: bool) -> int:
    run = await client.get_run(run_id)
    if as_json:
        while not run.status.finished:
            await trio.sleep(WATCH_INTERVAL_S)
            run = await client.get_run(run_id)
        echo_json(run)
        return run_exit_code(run)
    out = console()
    if not out.is_terminal:
        # Piped: a line per change of the run's status, as it happens (Live redraws only a
        # terminal, and would print nothing until the end).
        shown = None
        while True:
            if run.status is not shown:
                shown = run.status
                typer.echo(f"{run.run_id} {run.status.value}")
            if run.status.finished:
                break
            await trio.sleep(WATCH_INTERVAL_S)
            run = await client.get_run(run_id)
        out.print(run_renderable(run))
        return run_exit_code(run)
    with Live(run_renderable(run), console=out, refresh_per_second=LIVE_REFRESH_PER_S) as live:
        while not run.status.finished:
            await trio.sleep(WATCH_INTERVAL_S)
            run = await client.get_run(run_id)
            live.update(run_renderable(run))
    return run_exit_code(run)


__all__ = ["LIVE_REFRESH_PER_S", "WATCH_INTERVAL_S", "run_exit_code", "watch_run"]
