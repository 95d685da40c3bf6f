"""The ``dagnats`` command: the typer app and its one entry point.

Importing this loads typer and the command declarations only: each command imports what it runs
on (Trio, NATS, the HTTP stack, the engine) when it runs, so ``dagnats --help`` and a verb's
``--help`` answer without loading the runtime (``tests/cli/test_lazy_help.py``).
"""

from __future__ import annotations

import typer

from ._processes import demo, dev, serve, worker
from ._verb_inputs import inputs_app
from ._verb_journal import journal_app
from ._verb_run import run_app
from ._verb_workflow import workflow_app

app = typer.Typer(
    name="dagnats",
    help="A durable workflow and agent runtime for Trio, on NATS JetStream.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # Plain click help: it wraps at the terminal's width, where rich's option table cuts
    # option names and env vars short at 80 columns.
    rich_markup_mode=None,
)
app.command("demo")(demo)
app.command("dev")(dev)
app.command("serve")(serve)
app.command("worker")(worker)
app.add_typer(workflow_app, name="workflow")
app.add_typer(run_app, name="run")
app.add_typer(inputs_app, name="inputs")
app.add_typer(journal_app, name="journal")


def main() -> None:
    """The console script ``dagnats``."""
    app(prog_name="dagnats")
