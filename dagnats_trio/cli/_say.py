"""The CLI's consoles and its one-line failure, apart from the rest of ``_common``: a process
command (``dev``, ``serve``, ``worker``) refuses a bad option with these before it imports Trio,
NATS or its host, so the refusal costs the command line's parse and no more."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from .._host import HostSetupError
from ._contract import EXIT_USAGE

#: Width used when output is not a terminal (pipes, tests), so tables do not fold at 80.
PIPE_WIDTH_CHARS = 120


def console(stderr: bool = False) -> Console:
    out = Console(stderr=stderr)
    if not out.is_terminal:
        out = Console(stderr=stderr, width=PIPE_WIDTH_CHARS)
    return out


def fail(message: str, code: int, detail: tuple[str, ...] = ()) -> NoReturn:
    err = console(stderr=True)
    # soft_wrap: an error is one line however narrow the terminal (a pipe or a log keeps it).
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    for line in detail:
        err.print(f"  - {escape(line)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def setup_errors() -> Iterator[None]:
    """A bad option or argument found while building a host's config: one line, exit 2."""
    try:
        yield
    except HostSetupError as exc:
        fail(str(exc), EXIT_USAGE)


__all__ = ["PIPE_WIDTH_CHARS", "console", "fail", "setup_errors"]
