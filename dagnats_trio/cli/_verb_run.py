"""``dagnats run start|list|get|cancel|purge``.

Declarations only load typer and the option types (``dagnats --help`` reads them); what a verb
needs to run is imported when it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from ._options import DEFAULT_API_URL, ApiOpt, JsonOpt, TokenOpt, verb_group

if TYPE_CHECKING:
    from ._client import ApiClient

run_app = verb_group("Start, inspect, cancel and purge runs.")

RunIdArg = Annotated[str, typer.Argument(metavar="ID")]


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
    from ._common import call_api, console, echo_json, parse_json_arg
    from ._watch import watch_run

    async def go(client: ApiClient) -> int:
        value = parse_json_arg(input_json, "INPUT_JSON") if input_json is not None else None
        run_id = await client.start_run(workflow, value, idempotency_key)
        if watch:
            if not as_json:
                console().print(f"started run [bold]{run_id}[/]")
            return await watch_run(client, run_id, as_json)
        if as_json:
            echo_json({"run_id": run_id})
        else:
            typer.echo(run_id)
        return 0

    call_api(api, token, go, as_json=as_json)


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
    from ._common import answer, call_api
    from ._render import run_list_row, table_of

    async def go(client: ApiClient) -> int:
        page = await client.list_runs(workflow, status, limit)
        runs = sorted(page.runs, key=lambda r: (r.created_at_ms, r.run_id), reverse=True)
        table = table_of("run", "workflow", "status", "created", "error")
        for r in runs:
            table.add_row(*run_list_row(r))
        return answer(as_json, runs, table if runs else "no runs")

    call_api(api, token, go, as_json=as_json)


@run_app.command("get")
def run_get(
    run_id: RunIdArg,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a run and its steps."""
    from ._common import answer, call_api
    from ._render import run_renderable

    async def go(client: ApiClient) -> int:
        run = await client.get_run(run_id)
        return answer(as_json, run, run_renderable(run))

    call_api(api, token, go, as_json=as_json)


@run_app.command("cancel")
def run_cancel(
    run_id: RunIdArg,
    reason: Annotated[str, typer.Option(help="Recorded with the cancellation.")] = "cancelled",
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel a run (and its child runs); exits 1 if it has already finished."""
    from ._common import answer, call_api

    async def go(client: ApiClient) -> int:
        run = await client.cancel_run(run_id, reason)
        return answer(as_json, run, f"cancel requested for run [bold]{run.run_id}[/]")

    call_api(api, token, go, as_json=as_json)


@run_app.command("purge")
def run_purge(
    run_id: RunIdArg,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove a finished run and every trace of it, child runs too; exits 1 while it runs."""
    from ._common import answer, call_api
    from ._shapes import Purged

    async def go(client: ApiClient) -> int:
        await client.purge_run(run_id)
        return answer(as_json, Purged(run_id), f"purged run [bold]{run_id}[/]")

    call_api(api, token, go, as_json=as_json)


__all__ = ["run_app"]
