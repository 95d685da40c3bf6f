"""``dagnats workflow register|list|get``.

Declarations only load typer and the option types (``dagnats --help`` reads them); what a verb
needs to run is imported when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ._options import DEFAULT_API_URL, ApiOpt, JsonOpt, TokenOpt, verb_group

if TYPE_CHECKING:
    from ._client import ApiClient

workflow_app = verb_group("Workflow definitions.")


@workflow_app.command("register")
def workflow_register(
    file: Annotated[Path, typer.Argument(help="A workflow definition (JSON).")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate and store a workflow definition."""
    from ..protocol import JsonPolicyError, decode_json
    from ._common import answer, call_api, json_problem, read_text
    from ._errors import UsageError

    async def go(client: ApiClient) -> int:
        text = read_text(file, "workflow file")
        try:
            decode_json(text, where="document")
        except JsonPolicyError as exc:
            raise UsageError(f"{file} is not valid JSON: {json_problem(exc, 'document')}") from None
        stored = await client.register_workflow(text.encode())
        name = stored.get("name") if isinstance(stored, dict) else None
        steps = stored.get("steps") if isinstance(stored, dict) else None
        count = len(steps) if isinstance(steps, list) else 0
        noun = "step" if count == 1 else "steps"
        return answer(as_json, stored, f"registered workflow [bold]{name}[/] ({count} {noun})")

    call_api(api, token, go, as_json=as_json)


@workflow_app.command("list")
def workflow_list(
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the registered workflows."""
    from ._common import answer, call_api
    from ._render import table_of

    async def go(client: ApiClient) -> int:
        found = (await client.list_workflows()).workflows
        table = table_of("workflow", "version", "steps")
        for d in found:
            table.add_row(d.name, str(d.version), ", ".join(s.id for s in d.steps))
        return answer(as_json, list(found), table if found else "no workflows registered")

    call_api(api, token, go, as_json=as_json)


@workflow_app.command("get")
def workflow_get(
    name: Annotated[str, typer.Argument(metavar="NAME")],
    api: ApiOpt = DEFAULT_API_URL,
    token: TokenOpt = None,
) -> None:
    """Print a workflow's definition (JSON)."""
    from ._common import answer, call_api

    async def go(client: ApiClient) -> int:
        definition = await client.get_workflow(name)
        return answer(True, definition, "")

    call_api(api, token, go)


__all__ = ["workflow_app"]
