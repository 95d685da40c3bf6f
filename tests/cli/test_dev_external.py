"""``dagnats dev --nats URL`` (issue 16, item 4): dev's engine, API and workers on a server it
does not own, which it provisions and leaves running when it stops (useful for outage tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Final

import trio
from typer.testing import CliRunner

from dagnats_trio.cli import EXIT_USAGE, app
from dagnats_trio.protocol.layout import TASK_STREAM
from dagnats_trio.transport import open_nats_transport

from ._dev import start_dev
from .test_verbs import as_json, cli, register

WORKFLOW: Final = "dev-external-echo"


def _server_answers(url: str) -> bool:
    async def go() -> bool:
        async with open_nats_transport(url, name="dev-external-check") as t:
            await t.ping()
            await t.stream_info(TASK_STREAM)
        return True

    return trio.run(go)


def test_dev_runs_on_an_external_server_and_leaves_it_alone(nats_url: str, tmp_path: Path) -> None:
    dev = start_dev(
        ["--nats", nats_url, "--listen", "127.0.0.1:0", "--worker", "_workers:handlers"]
    )
    try:
        assert dev.banner["nats"] == nats_url
        assert dev.banner["server"] == "external: left running when dev stops"
        assert "nats-server pid" not in dev.banner and "data dir" not in dev.banner
        register(dev, tmp_path, {"name": WORKFLOW, "steps": [{"id": "e", "task": "cli_echo"}]})
        run = as_json(cli(dev, "run", "start", WORKFLOW, '{"n": 7}', "--watch", "--json"))
        assert run["status"] == "completed" and run["output"] == {"echo": {"n": 7}}
    finally:
        rc = dev.stop()
    print(f"dev on {nats_url}: run {run['status']}, dev rc {rc}")
    assert rc == 0
    assert _server_answers(nats_url)  # still there, still provisioned


def test_dev_refuses_nats_port_with_an_external_server(nats_url: str) -> None:
    result = CliRunner().invoke(app, ["dev", "--nats", nats_url, "--nats-port", "4333"])
    assert result.exit_code == EXIT_USAGE
    assert "--nats-port" in (result.stdout + (result.stderr or ""))
