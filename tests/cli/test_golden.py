"""Golden-journal replay (issue 15 part 2): record on a real nats-server (``dagnats dev``),
``dagnats journal export``, then replay new code with no NATS, by the CLI and the library."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from typer.testing import Result

from dagnats_trio.api import JournalEntry
from dagnats_trio.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from dagnats_trio.testing import (
    AGENT_STEP_ID,
    agent_workflow,
    expected_answer,
    load_golden,
    replay_golden,
)
from dagnats_trio.worker import GoldenEntry
from tests.docs._blocks import blocks

from . import _golden_workers
from ._dev import DevProcess, start_dev
from ._inproc import invoke

HERE = Path(__file__).parent
UPGRADING_MD = HERE.parents[1] / "docs" / "upgrading.md"
#: Bound of the wait for the recorded run to finish.
RUN_WAIT_S = 30.0
#: Bound of the documented shell block.
SHELL_BLOCK_TIMEOUT_S = 120.0
#: The first line of the documented export-and-replay block.
UPGRADE_SH = 'uv run dagnats journal export "$RUN" agent > tests/golden/agent.jsonl'
#: ``uv run X`` in a documented block means X of this virtualenv.
SHELL_PRELUDE = 'uv() { if [ "$1" = run ]; then shift; fi; "$@"; }\nset -euo pipefail\n'
#: The "new code" of the documented block: the same agent.
MY_AGENT = "from dagnats_trio.testing import ScriptedAgent\n\nturn = ScriptedAgent().turn\n"


def cli(dev: DevProcess | None, *args: str) -> Result:
    env = {"DAGNATS_API_URL": dev.api_url if dev else "http://127.0.0.1:1", "COLUMNS": "200"}
    result = invoke(args, env=env)
    out = result.stdout + (result.stderr or "")
    assert "Traceback" not in out, out
    return result


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A journal of the scripted agent recorded by ``dagnats dev`` and exported by the CLI."""
    data = tmp_path_factory.mktemp("golden-dev")
    proc = start_dev(
        [
            "--data-dir",
            str(data),
            "--listen",
            "127.0.0.1:0",
            "--worker",
            "_golden_workers:handlers",
        ],
        cwd=HERE,
    )
    try:
        wf = data / "wf.json"
        wf.write_text(json.dumps(agent_workflow("golden-agent")))
        assert cli(proc, "workflow", "register", str(wf)).exit_code == EXIT_OK
        started = cli(proc, "run", "start", "golden-agent", '"deploy"', "--json")
        assert started.exit_code == EXIT_OK, started.stdout
        run_id = json.loads(started.stdout)["run_id"]
        deadline = time.monotonic() + RUN_WAIT_S
        while True:
            run: dict[str, Any] = json.loads(cli(proc, "run", "get", run_id, "--json").stdout)
            if run["status"] != "running":
                break
            assert time.monotonic() < deadline, run
            time.sleep(0.05)
        assert run["status"] == "completed", run
        assert run["steps"][0]["output"] == expected_answer()
        assert cli(proc, "journal", "export", run_id, "nope").exit_code != EXIT_OK
        # the documented shell block, as written, from a project with the new code in it
        work = data / "project"
        (work / "tests" / "golden").mkdir(parents=True)
        (work / "my_agent.py").write_text(MY_AGENT)
        script = next(
            b.text
            for b in blocks("sh")
            if b.file == "docs/upgrading.md" and b.key[1].startswith(UPGRADE_SH)
        )
        done = subprocess.run(
            ["bash", "-c", SHELL_PRELUDE + script],
            cwd=work,
            env={
                **os.environ,
                "RUN": run_id,
                "DAGNATS_API_URL": proc.api_url,
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            },
            capture_output=True,
            text=True,
            timeout=SHELL_BLOCK_TIMEOUT_S,
        )
        print(done.stdout)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.strip() == "ok: 4 deliveries replayed, no findings"
    finally:
        assert proc.stop() == 0
    yield work / "tests" / "golden" / "agent.jsonl"


def test_export_writes_the_header_and_every_record(golden: Path) -> None:
    lines = [json.loads(line) for line in golden.read_text().splitlines()]
    assert lines[0]["golden"] == 1 and lines[0]["step_id"] == AGENT_STEP_ID
    assert lines[0]["input"] == "deploy"
    types = [line["type"] for line in lines[1:]]
    # four iterations: claim, model, (tool intent, tool result,) commit
    assert types.count("claim") == 4 and types.count("commit") == 4
    assert types.count("tool.intent") == 3 and types.count("model") == 4
    recorded = load_golden(golden)
    assert len(recorded.entries) == len(lines) - 1


@pytest.fixture
def in_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the CLI from this directory, so ``_golden_workers:...`` imports as a user's module."""
    monkeypatch.chdir(HERE)


@pytest.mark.usefixtures("in_here")
def test_cli_replay_of_the_same_code_is_clean(golden: Path) -> None:
    res = cli(None, "journal", "replay", str(golden), "_golden_workers:turn")
    assert res.exit_code == EXIT_OK, res.stdout
    assert res.stdout.strip() == "ok: 4 deliveries replayed, no findings"


@pytest.mark.usefixtures("in_here")
def test_cli_replay_reports_a_changed_call_with_its_position(golden: Path) -> None:
    res = cli(None, "journal", "replay", str(golden), "_golden_workers:changed_input")
    assert res.exit_code == EXIT_FAILED, res.stdout
    lines = res.stdout.strip().splitlines()
    print("findings:", lines)
    assert len(lines) == 1
    assert lines[0].startswith("iteration 1 attempt 1 position 1: ReplayMismatch: recorded tool")
    assert '"deploying"' in lines[0] and '"deploying v2"' in lines[0]


@pytest.mark.usefixtures("in_here")
def test_cli_replay_refuses_bad_input(golden: Path, tmp_path: Path) -> None:
    assert cli(None, "journal", "replay", str(golden), "nosuchmodule:x").exit_code == EXIT_USAGE
    assert cli(None, "journal", "replay", str(golden), "no_colon").exit_code == EXIT_USAGE
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"golden": 1, "run_id": "r", "step_id": "s"}\n{not json\n')
    res = cli(None, "journal", "replay", str(bad), "_golden_workers:turn")
    assert res.exit_code == EXIT_USAGE and "line 2" in res.stderr
    missing = cli(None, "journal", "replay", str(tmp_path / "none.jsonl"), "_golden_workers:turn")
    assert missing.exit_code == EXIT_USAGE


async def test_library_replay_reports_a_changed_commit(golden: Path) -> None:
    same = await replay_golden(golden, _golden_workers.turn)
    assert same.ok and same.deliveries == 4
    changed = await replay_golden(golden, _golden_workers.changed_answer)
    kinds = {(f.iteration, f.kind) for f in changed.findings}
    print("findings:", [str(f) for f in changed.findings])
    assert kinds == {(3, "changed commit output")}
    out = changed.findings[0]
    assert out.recorded.startswith('{"answer":"deployed; ops notified"')
    assert out.new.startswith('{"result":{"answer":"deployed; ops notified"')
    # another task input changes the state the first iteration commits
    other = await replay_golden(golden, _golden_workers.turn, input="other")
    assert [(f.iteration, f.kind) for f in other.findings] == [(0, "changed commit state")]


async def test_the_upgrading_doc_example_runs(golden: Path) -> None:
    text = UPGRADING_MD.read_text(encoding="utf-8")
    block = re.search(r"<!-- upgrade-check -->\n```python\n(.*?)```", text, re.S)
    assert block is not None
    code = block.group(1)
    assert "from my_agent import turn" in code and '"tests/golden/agent.jsonl"' in code
    code = code.replace("from my_agent import turn", f"from {_golden_workers.__name__} import turn")
    code = code.replace('"tests/golden/agent.jsonl"', repr(str(golden)))
    namespace: dict[str, Any] = {}
    exec(compile(code, str(UPGRADING_MD), "exec"), namespace)
    await namespace["test_the_new_code_replays_production"]()
    bad = code.replace("import turn", "import changed_input as turn")
    exec(compile(bad, str(UPGRADING_MD), "exec"), namespace)
    with pytest.raises(AssertionError, match="ReplayMismatch"):
        await namespace["test_the_new_code_replays_production"]()


def test_a_golden_line_is_the_rest_readers_entry() -> None:
    """The export writes the REST reader's entries; the replay reads them as ``GoldenEntry``."""
    assert [a.name for a in attrs.fields(GoldenEntry)] == [
        a.name for a in attrs.fields(JournalEntry)
    ]
