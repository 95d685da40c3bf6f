"""``dagnats inputs send|get|withdraw``.

Declarations only load typer and the option types (``dagnats --help`` reads them); what a verb
needs to run is imported when it runs.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Annotated

import typer

from ._options import DEFAULT_API_URL, ApiOpt, JsonOpt, RunArg, StepArg, TokenOpt, verb_group

if TYPE_CHECKING:
    from ._client import ApiClient

inputs_app = verb_group("Send inputs to a running agent step.")

RequestIdArg = Annotated[str, typer.Argument(metavar="REQUEST_ID")]


class ModeChoice(enum.StrEnum):
    steer = "steer"
    follow_up = "follow_up"


@inputs_app.command("send")
def inputs_send(
    run_id: RunArg,
    step_id: StepArg,
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
    from rich.text import Text

    from ._common import answer, call_api, parse_json_arg
    from ._render import status_text

    async def go(client: ApiClient) -> int:
        content = parse_json_arg(content_json, "CONTENT_JSON")
        sub, created = await client.submit_input(run_id, step_id, request_id, mode.value, content)
        what = "accepted" if created else "already submitted (the original is kept)"
        line = Text.assemble("input ", (sub.request_id, "bold"), f" {what}, now ")
        return answer(as_json, sub, line.append_text(status_text(sub.status.value)))

    call_api(api, token, go, as_json=as_json)


@inputs_app.command("get")
def inputs_get(
    run_id: RunArg,
    step_id: StepArg,
    request_id: RequestIdArg,
    wait: Annotated[
        str | None, typer.Option(help="Wait up to this long for a change, e.g. 30s.")
    ] = None,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show an input's status (queued, placed, done, withdrawn, unanswered)."""
    from ._common import answer, call_api, parse_wait_s
    from ._render import submission_renderable

    async def go(client: ApiClient) -> int:
        wait_s = parse_wait_s(wait)
        sub = await client.get_input(run_id, step_id, request_id, wait_s)
        return answer(as_json, sub, submission_renderable(sub))

    call_api(api, token, go, as_json=as_json)


@inputs_app.command("withdraw")
def inputs_withdraw(
    run_id: RunArg,
    step_id: StepArg,
    request_id: RequestIdArg,
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Withdraw a queued input; exits 1 if it was already placed."""
    from rich.text import Text

    from ._common import answer, call_api

    async def go(client: ApiClient) -> int:
        await client.withdraw_input(run_id, step_id, request_id)
        line = Text.assemble("input ", (request_id, "bold"), " withdrawn")
        return answer(as_json, {"request_id": request_id, "withdrawn": True}, line)

    call_api(api, token, go, as_json=as_json)


__all__ = ["ModeChoice", "inputs_app"]
