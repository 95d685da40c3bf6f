"""``dagnats journal tail|export|replay|check``.

Declarations only load typer and the option types (``dagnats --help`` reads them); what a verb
needs to run is imported when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._contract import EXIT_FAILED
from ._options import DEFAULT_API_URL, ApiOpt, JsonOpt, RunArg, StepArg, TokenOpt, verb_group

if TYPE_CHECKING:
    from ._client import ApiClient

journal_app = verb_group("Read and audit a step's journal.")


@journal_app.command("tail")
def journal_tail(
    run_id: RunArg,
    step_id: StepArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing records until the step ends.")
    ] = False,
    from_seq: Annotated[int, typer.Option("--from", min=1, help="First sequence to show.")] = 1,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print a step's journal records (with --json, one JSON object per line)."""
    from rich.text import Text

    from ._common import call_api, console, echo_json
    from ._follow import follow_journal
    from ._journal import decode_entries, timeline
    from ._render import timeline_table

    async def go(client: ApiClient) -> int:
        if follow:
            return await follow_journal(client, run_id, step_id, from_seq, as_json)
        entries = await client.journal_all(run_id, step_id, from_seq)
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

    call_api(api, token, go, as_json=as_json)


@journal_app.command("export")
def journal_export(
    run_id: RunArg,
    step_id: StepArg,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
) -> None:
    """Print a step's journal as a golden file (JSON lines) for `dagnats journal replay`."""
    from ..worker import GOLDEN_FORMAT_VERSION, GoldenHeader
    from ._common import call_api, echo_json
    from ._errors import UsageError

    async def go(client: ApiClient) -> int:
        run = await client.get_run(run_id)
        entries = await client.journal_all(run_id, step_id)
        if not entries:
            raise UsageError(f"step {step_id!r} of run {run_id!r} has no journal records")
        header = GoldenHeader(GOLDEN_FORMAT_VERSION, run_id, step_id, run.input)
        echo_json(header)
        for entry in entries:
            echo_json(entry)
        return 0

    call_api(api, token, go)


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
    from .._host import HostSetupError, import_spec
    from ..worker import GoldenFormatError, parse_golden, replay_golden
    from ._common import parse_json_arg, read_text, run_async
    from ._errors import UsageError

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


@journal_app.command("check")
def journal_check(
    run_id: RunArg,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Audit the journal of every journal step of a run; exit 1 on a violation."""
    from ._common import answer, call_api
    from ._journal import check_run
    from ._render import check_renderable
    from ._shapes import run_check_json

    async def go(client: ApiClient) -> int:
        result = await check_run(client, run_id)
        answer(as_json, run_check_json(run_id, result), check_renderable(result))
        return 0 if result.ok else EXIT_FAILED

    call_api(api, token, go, as_json=as_json)


__all__ = ["journal_app"]
