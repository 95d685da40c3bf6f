"""Rich renderings of what the API answers: runs, inputs, journal timelines and audits."""

from __future__ import annotations

import datetime

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..api import RunSummary, RunView
from ..inputs import Submission
from ._journal import Mark, RunCheck, TimelineRow, short

_STATUS_STYLE = {
    "completed": "green",
    "done": "green",
    "running": "cyan",
    "waiting": "yellow",
    "queued": "yellow",
    "placed": "cyan",
    "pending": "dim",
    "failed": "red",
    "cancelled": "magenta",
    "withdrawn": "magenta",
    "unanswered": "magenta",
}

_MARK_STYLE = {
    Mark.RECOVERED: "bold yellow",
    Mark.REUSED: "green",
    Mark.INTERRUPTED: "bold red",
    Mark.INPUT: "bold cyan",
    Mark.RETRY: "yellow",
}


def status_text(status: str) -> Text:
    return Text(status, style=_STATUS_STYLE.get(status, ""))


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def table_of(*columns: str, title: str | None = None) -> Table:
    """A table with these column headings (and its title, on the left)."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    return table


def _fields() -> Table:
    """A grid of ``name  value`` lines, the names in bold."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    return grid


def run_list_row(run: RunSummary) -> tuple[str, str, Text, str, Text]:
    """A run's line in ``run list``."""
    return (
        run.run_id,
        run.workflow,
        status_text(run.status.value),
        _time(run.created_at_ms),
        Text(run.error or ""),
    )


def run_renderable(run: RunView) -> RenderableType:
    head = _fields()
    head.add_row("run", run.run_id)
    head.add_row("workflow", run.workflow)
    head.add_row("status", status_text(run.status.value))
    head.add_row("created", _time(run.created_at_ms))
    if run.finished_at_ms is not None:
        head.add_row("finished", _time(run.finished_at_ms))
    if run.output is not None:
        head.add_row("output", short(run.output, 100))
    if run.error:
        where = f" (step {run.failed_step})" if run.failed_step else ""
        head.add_row("error", Text(run.error + where, style="red"))
    steps = table_of(
        "step", "status", "iteration", "attempt", "iterations", "output / error", title="steps"
    )
    for s in run.steps:
        detail = Text(s.error, style="red") if s.error else Text(short(s.output, 60))
        steps.add_row(
            s.step_id,
            status_text(s.status.value),
            "-" if s.iteration is None else str(s.iteration),
            "-" if s.attempt is None else str(s.attempt),
            str(s.iterations),
            detail,
        )
    # A step that waits on a task type nobody polls says so under the table: it will not move.
    hints = [
        Text(f"step {s.step_id}: {s.no_worker.message}; start a worker for it", style="yellow")
        for s in run.steps
        if s.no_worker is not None
    ]
    return Group(head, steps, *hints)


def submission_renderable(sub: Submission) -> RenderableType:
    grid = _fields()
    grid.add_row("request", Text(sub.request_id))  # an id may hold "[": not markup
    grid.add_row("run / step", f"{sub.run_id} / {sub.step_id}")
    grid.add_row("mode", sub.mode.value)
    grid.add_row("status", status_text(sub.status.value))
    grid.add_row("content", Text(short(sub.content, 100)))
    if sub.placed_iteration is not None:
        grid.add_row("placed in iteration", str(sub.placed_iteration))
    return grid


def timeline_table(rows: list[TimelineRow], title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("seq", justify="right")
    table.add_column("iter", justify="right")
    table.add_column("type")
    table.add_column("call", justify="right")
    table.add_column("detail")
    for row in rows:
        table.add_row(*timeline_cells(row))
    return table


def timeline_cells(row: TimelineRow) -> tuple[str, str, str, str, Text]:
    detail = Text()
    if row.mark is not Mark.NONE:
        detail.append(f"[{row.mark.value}] ", style=_MARK_STYLE.get(row.mark, ""))
    detail.append(row.detail)
    return (
        str(row.seq),
        str(row.iteration),
        row.type,
        "" if row.call is None else str(row.call),
        detail,
    )


def check_renderable(result: RunCheck) -> RenderableType:
    lines: list[RenderableType] = []
    if not result.steps:
        lines.append(Text(f"run {result.run.run_id} has no journal steps: nothing to check"))
    for step in result.steps:
        style = "green" if step.ok else "bold red"
        summary = step.report.summary()
        if not step.compared_iterations:
            summary += " (step running: iteration count not compared)"
        lines.append(Text(f"{step.step_id}: {summary}", style=style))
        for v in step.report.violations:
            lines.append(Text(f"  {v}", style="red"))
    return Group(*lines)
