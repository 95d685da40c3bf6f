"""The options every verb over the API takes: where the API is, its token, and ``--json``."""

from __future__ import annotations

from typing import Annotated

import typer

from ._contract import DEFAULT_API_URL

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
#: A run and a step named on the command line (``dagnats inputs|journal ... RUN STEP``).
RunArg = Annotated[str, typer.Argument(metavar="RUN")]
StepArg = Annotated[str, typer.Argument(metavar="STEP")]


def verb_group(help: str) -> typer.Typer:
    """A group of verbs (``dagnats run ...``): plain click help, like the top level."""
    return typer.Typer(help=help, no_args_is_help=True, rich_markup_mode=None)


__all__ = [
    "DEFAULT_API_URL",
    "ApiOpt",
    "JsonOpt",
    "RunArg",
    "StepArg",
    "TokenOpt",
    "verb_group",
]
