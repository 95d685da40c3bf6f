"""The verbs over the REST API: workflow, run, inputs, journal."""

from __future__ import annotations

import enum
import time
from pathlib import Path
from typing import Annotated, Final

import attrs
import trio
import typer
from rich.live import Live
from rich.markup import escape
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from .._host import HostSetupError, import_spec
from ..api import JournalEntry, RunView
from ..journal import UNDECODABLE_RULE
from ..protocol import JsonPolicyError, RunStatus, decode_json
from ..worker import (
    GOLDEN_FORMAT_VERSION,
    GoldenFormatError,
    GoldenHeader,
    parse_golden,
    replay_golden,
)
from ._client import (
    DEFAULT_API_URL,
    EXIT_FAILED,
    ApiClient,
    UsageError,
)
from ._common import (
    console,
    echo_json,
    json_problem,
    parse_json_arg,
    parse_wait_s,
    read_text,
    run_async,
)
from ._journal import check_run, decode_entries, timeline
from ._render import (
    check_renderable,
    run_renderable,
    status_text,
    submission_renderable,
    timeline_cells,
    timeline_table,
)

#: How often ``run start --watch`` looks at the run.
WATCH_INTERVAL_S: Final = 0.5
#: Live view refreshes per second.
LIVE_REFRESH_PER_S: Final = 4

ApiOpt = Annotated[
    str,
    typer.Option("--api", envvar="DAGNATS_API_URL", help="URL of the REST API.", show_default=True),
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="DAGNATS_API_TOKEN",
        help="Bearer token of the API (when it requires one).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


class ModeChoice(enum.StrEnum):
    steer = "steer"
    follow_up = "follow_up"


workflow_app = typer.Typer(
    help="Workflow definitions.", no_args_is_help=True, rich_markup_mode=None
)
run_app = typer.Typer(
    help="Start, inspect, cancel and purge runs.", no_args_is_help=True, rich_markup_mode=None
)
inputs_app = typer.Typer(
    help="Send inputs to a running agent step.", no_args_is_help=True, rich_markup_mode=None
)
journal_app = typer.Typer(
    help="Read and audit a step's journal.", no_args_is_help=True, rich_markup_mode=None
)


# --- workflow ---------------------------------------------------------------------------------


@workflow_app.command("register")
def workflow_register(
    file: Annotated[Path, typer.Argument(help="A workflow definition (JSON).")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate and store a workflow definition."""

    async def go() -> int:
        text = read_text(file, "workflow file")
        try:
            decode_json(text, where="document")
        except JsonPolicyError as exc:
            raise UsageError(f"{file} is not valid JSON: {json_problem(exc, 'document')}") from None
        async with ApiClient(api, token) as client:
            stored = await client.register_workflow(text.encode())
        if as_json:
            echo_json(stored)
            return 0
        name = stored.get("name") if isinstance(stored, dict) else None
        steps = stored.get("steps") if isinstance(stored, dict) else None
        count = len(steps) if isinstance(steps, list) else 0
        noun = "step" if count == 1 else "steps"
        console().print(f"registered workflow [bold]{name}[/] ({count} {noun})")
        return 0

    run_async(go, as_json=as_json)


@workflow_app.command("list")
def workflow_list(
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the registered workflows."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            found = (await client.list_workflows()).workflows
        if as_json:
            echo_json(list(found))
            return 0
        table = Table(title_justify="left")
        for col in ("workflow", "version", "steps"):
            table.add_column(col)
        for d in found:
            table.add_row(d.name, str(d.version), ", ".join(s.id for s in d.steps))
        console().print(table if found else "no workflows registered")
        return 0

    run_async(go, as_json=as_json)


@workflow_app.command("get")
def workflow_get(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
) -> None:
    """Print a workflow's definition (JSON)."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            definition = await client.get_workflow(name)
        echo_json(definition)
        return 0

    run_async(go)


# --- run --------------------------------------------------------------------------------------


def _run_exit_code(run: RunView) -> int:
    return 0 if run.status is not RunStatus.FAILED and run.status is not RunStatus.CANCELLED else 1


async def _watch(client: ApiClient, run_id: str, as_json: bool) -> int:
    run = await client.get_run(run_id)
    if as_json:
        while not run.status.finished:
            await trio.sleep(WATCH_INTERVAL_S)
            run = await client.get_run(run_id)
        echo_json(run)
        return _run_exit_code(run)
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
        return _run_exit_code(run)
    with Live(run_renderable(run), console=out, refresh_per_second=LIVE_REFRESH_PER_S) as live:
        while not run.status.finished:
            await trio.sleep(WATCH_INTERVAL_S)
            run = await client.get_run(run_id)
            live.update(run_renderable(run))
    return _run_exit_code(run)


@run_app.command("start")
def run_start(
    workflow: Annotated[str, typer.Argument(help="Name of a registered workflow.")],
    input_json: Annotated[
        str | None, typer.Argument(metavar="[INPUT_JSON]", help="Run input: JSON, or @FILE.")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option(help="The same key returns the run it started first.")
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", help="Follow the run until it ends.")] = False,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run; with --watch, follow it until it ends (exit 1 if it fails). An agent step
    that waits for follow-ups does not end by itself: stop watching with Ctrl-C, or cancel it."""

    async def go() -> int:
        value = parse_json_arg(input_json, "INPUT_JSON") if input_json is not None else None
        async with ApiClient(api, token) as client:
            run_id = await client.start_run(workflow, value, idempotency_key)
            if watch:
                if not as_json:
                    console().print(f"started run [bold]{run_id}[/]")
                return await _watch(client, run_id, as_json)
        if as_json:
            echo_json({"run_id": run_id})
        else:
            typer.echo(run_id)
        return 0

    run_async(go, as_json=as_json)


@run_app.command("list")
def run_list(
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow.")] = None,
    status: Annotated[
        str | None, typer.Option(help="Only runs with this status (running, completed...).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Most runs to list.")] = 50,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs, newest first."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            page = await client.list_runs(workflow, status, limit)
        runs = sorted(page.runs, key=lambda r: (r.created_at_ms, r.run_id), reverse=True)
        if as_json:
            echo_json(runs)
            return 0
        table = Table(title_justify="left")
        for col in ("run", "workflow", "status", "created", "error"):
            table.add_column(col)
        for r in runs:
            created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.created_at_ms / 1000))
            table.add_row(
                r.run_id, r.workflow, status_text(r.status.value), created, escape(r.error or "")
            )
        console().print(table if runs else "no runs")
        return 0

    run_async(go, as_json=as_json)


@run_app.command("get")
def run_get(
    run_id: Annotated[str, typer.Argument(metavar="ID")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a run and its steps."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            run = await client.get_run(run_id)
        if as_json:
            echo_json(run)
        else:
            console().print(run_renderable(run))
        return 0

    run_async(go, as_json=as_json)


@run_app.command("cancel")
def run_cancel(
    run_id: Annotated[str, typer.Argument(metavar="ID")],
    reason: Annotated[str, typer.Option(help="Recorded with the cancellation.")] = "cancelled",
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a run (and its child runs); exits 1 if it has already finished."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            run = await client.cancel_run(run_id, reason)
        if as_json:
            echo_json(run)
        else:
            console().print(f"cancel requested for run [bold]{run.run_id}[/]")
        return 0

    run_async(go, as_json=as_json)


@attrs.frozen
class _PurgedJson:
    run_id: str
    purged: bool = True


@run_app.command("purge")
def run_purge(
    run_id: Annotated[str, typer.Argument(metavar="ID")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove a finished run and every trace of it, child runs too; exits 1 while it runs."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            await client.purge_run(run_id)
        if as_json:
            echo_json(_PurgedJson(run_id))
        else:
            console().print(f"purged run [bold]{run_id}[/]")
        return 0

    run_async(go, as_json=as_json)


# --- inputs -----------------------------------------------------------------------------------


@inputs_app.command("send")
def inputs_send(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    step_id: Annotated[str, typer.Argument(metavar="STEP")],
    content_json: Annotated[str, typer.Argument(metavar="CONTENT_JSON", help="JSON, or @FILE.")],
    request_id: Annotated[
        str, typer.Option("--request-id", help="Your id for it; a repeat returns the original.")
    ],
    mode: Annotated[ModeChoice, typer.Option("--mode", help="steer or follow_up.")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit an input (steer: joins the current turn; follow_up: after the final answer)."""

    async def go() -> int:
        content = parse_json_arg(content_json, "CONTENT_JSON")
        async with ApiClient(api, token) as client:
            sub, created = await client.submit_input(
                run_id, step_id, request_id, mode.value, content
            )
        if as_json:
            echo_json(sub)
        else:
            what = "accepted" if created else "already submitted (the original is kept)"
            out = console()
            out.print(
                f"input [bold]{escape(sub.request_id)}[/] {what}, now",
                status_text(sub.status.value),
            )
        return 0

    run_async(go, as_json=as_json)


@inputs_app.command("get")
def inputs_get(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    step_id: Annotated[str, typer.Argument(metavar="STEP")],
    request_id: Annotated[str, typer.Argument(metavar="REQUEST_ID")],
    wait: Annotated[
        str | None, typer.Option(help="Wait up to this long for a change, e.g. 30s.")
    ] = None,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show an input's status (queued, placed, done, withdrawn, unanswered)."""

    async def go() -> int:
        wait_s = parse_wait_s(wait)
        async with ApiClient(api, token) as client:
            sub = await client.get_input(run_id, step_id, request_id, wait_s)
        if as_json:
            echo_json(sub)
        else:
            console().print(submission_renderable(sub))
        return 0

    run_async(go, as_json=as_json)


@inputs_app.command("withdraw")
def inputs_withdraw(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    step_id: Annotated[str, typer.Argument(metavar="STEP")],
    request_id: Annotated[str, typer.Argument(metavar="REQUEST_ID")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Withdraw a queued input; exits 1 if it was already placed."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            await client.withdraw_input(run_id, step_id, request_id)
        if as_json:
            echo_json({"request_id": request_id, "withdrawn": True})
        else:
            console().print(f"input [bold]{escape(request_id)}[/] withdrawn")
        return 0

    run_async(go, as_json=as_json)


# --- journal ----------------------------------------------------------------------------------


@journal_app.command("tail")
def journal_tail(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    step_id: Annotated[str, typer.Argument(metavar="STEP")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing records until the step ends.")
    ] = False,
    from_seq: Annotated[int, typer.Option("--from", min=1, help="First sequence to show.")] = 1,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a step's journal records (with --json, one JSON object per line)."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            if follow:
                return await _follow(client, run_id, step_id, from_seq, as_json)
            entries: list[JournalEntry] = []
            cursor = from_seq
            while True:
                page = await client.journal_page(run_id, step_id, cursor)
                if not page.records:
                    break
                entries.extend(page.records)
                cursor = page.next
        if as_json:
            for entry in entries:
                echo_json(entry)
            return 0
        records, problems = decode_entries(entries)
        out = console()
        out.print(timeline_table(timeline(records), title=f"journal.{run_id}.{step_id}"))
        for problem in problems:
            out.print(Text(str(problem), style="red"))
        return 0

    run_async(go, as_json=as_json)


async def _follow(
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


@journal_app.command("export")
def journal_export(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    step_id: Annotated[str, typer.Argument(metavar="STEP")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
) -> None:
    """Print a step's journal as a golden file (JSON lines) for `dagnats journal replay`."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            run = await client.get_run(run_id)
            entries = await client.journal_all(run_id, step_id)
        if not entries:
            raise UsageError(f"step {step_id!r} of run {run_id!r} has no journal records")
        header = GoldenHeader(GOLDEN_FORMAT_VERSION, run_id, step_id, run.input)
        echo_json(header)
        for entry in entries:
            echo_json(entry)
        return 0

    run_async(go)


@journal_app.command("replay")
def journal_replay(
    golden: Annotated[Path, typer.Argument(metavar="GOLDEN", help="A file from journal export.")],
    handler: Annotated[
        str, typer.Argument(metavar="MODULE:HANDLER", help="The new handler, e.g. app.agent:turn")
    ],
    input_json: Annotated[
        str | None,
        typer.Option("--input", help="The task input (JSON or @FILE) instead of the run's."),
    ] = None,
) -> None:
    """Run a new handler against a recorded journal with no NATS; one line per finding, exit 1
    when the new code would not replay it."""

    async def go() -> int:
        try:
            recorded = parse_golden(read_text(golden, "GOLDEN"))
        except GoldenFormatError as exc:
            raise UsageError(f"{golden}: {exc}") from None
        try:
            fn = import_spec(handler, "app.agent:turn")
        except HostSetupError as exc:
            raise UsageError(str(exc)) from None
        if not callable(fn):
            raise UsageError(f"{handler} is not callable")
        if input_json is None:
            report = await replay_golden(recorded, fn)
        else:
            report = await replay_golden(recorded, fn, input=parse_json_arg(input_json, "--input"))
        for finding in report.findings:
            typer.echo(str(finding))
        if report.ok:
            typer.echo(f"ok: {report.deliveries} deliveries replayed, no findings")
            return 0
        return EXIT_FAILED

    run_async(go)


@attrs.frozen
class _StepCheckJson:
    step_id: str
    ok: bool
    summary: str
    violations: tuple[str, ...]
    #: The ``undecodable`` violations again (kept for scripts that read this field).
    undecodable: tuple[str, ...]
    iterations_compared: bool


@attrs.frozen
class _RunCheckJson:
    run_id: str
    ok: bool
    steps: tuple[_StepCheckJson, ...]


@journal_app.command("check")
def journal_check(
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Audit the journal of every journal step of a run; exit 1 on a violation."""

    async def go() -> int:
        async with ApiClient(api, token) as client:
            result = await check_run(client, run_id)
        if as_json:
            echo_json(
                _RunCheckJson(
                    run_id,
                    result.ok,
                    tuple(
                        _StepCheckJson(
                            s.step_id,
                            s.ok,
                            s.report.summary(),
                            tuple(str(v) for v in s.report.violations),
                            tuple(
                                str(v) for v in s.report.violations if v.rule == UNDECODABLE_RULE
                            ),
                            s.compared_iterations,
                        )
                        for s in result.steps
                    ),
                )
            )
        else:
            console().print(check_renderable(result))
        return 0 if result.ok else EXIT_FAILED

    run_async(go, as_json=as_json)


__all__ = [
    "inputs_app",
    "journal_app",
    "run_app",
    "workflow_app",
]
