"""``--help`` of every command is readable at 80 columns: no line is longer, and every option
is named in full (rich's table cut names and env vars short at that width)."""

from __future__ import annotations

from typing import Any

import typer

from dagnats_trio.cli import app

from ._inproc import invoke

#: The width of a default terminal.
COLUMNS = 80


def _commands(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path under ``group`` (typer's command objects, by their attributes)."""
    subs = getattr(group, "commands", None)
    if subs is None:
        return [path]
    out: list[tuple[str, ...]] = [path]
    for name, sub in subs.items():
        out += _commands(sub, (*path, name))
    return out


def test_every_help_fits_80_columns_and_names_every_option() -> None:
    root = typer.main.get_command(app)
    paths = _commands(root)
    assert ("run", "list") in paths and ("dev",) in paths
    for path in paths:
        result = invoke([*path, "--help"], env={"COLUMNS": str(COLUMNS)}, terminal_width=COLUMNS)
        assert result.exit_code == 0, (path, result.stdout)
        long = [line for line in result.stdout.splitlines() if len(line) > COLUMNS]
        assert not long, (path, long)
        command: Any = root
        for name in path:
            command = command.commands[name]
        for param in command.params:
            if param.param_type_name == "option":
                for opt in [*param.opts, *param.secondary_opts]:
                    assert opt in result.stdout, (path, opt)
                if param.envvar:
                    assert str(param.envvar) in result.stdout, (path, param.envvar)
    print(f"{len(paths)} help pages checked at {COLUMNS} columns")
