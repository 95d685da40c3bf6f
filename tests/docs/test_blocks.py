"""Every python and sh block of README.md and docs/ is run as written by a test (or listed here
with the reason it is not), and the README's and the quickstart's blocks run against a real
``dagnats dev``: the worker finds it through the ``DAGNATS_NATS_URL`` that ``dev`` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli._dev import DevProcess, start_dev

from ._blocks import PROGRAM_START_TIMEOUT_S, ROOT, block, blocks, start_program

#: Bound of one documented shell block against a running dev.
SHELL_BLOCK_TIMEOUT_S = 120.0

#: The blocks a test runs: (file, first line) -> the test.
RUN: dict[tuple[str, str], str] = {
    ("docs/embedding.md", "# service.py"): "test_embedding.py::test_the_twenty_line_service",
    ("docs/embedding.md", "import trio"): "test_embedding.py::test_the_nursery_block_runs",
    (
        "README.md",
        "# worker.py: run `uv run dagnats dev` in one shell, then, with the "
        "DAGNATS_NATS_URL it prints,",
    ): "test_the_readme_worker_against_dev",
    ("docs/quickstart.md", "# myagent.py"): "test_the_quickstart_worker_against_dev",
    (
        "docs/quickstart.md",
        "uv run dagnats dev --worker myagent:handlers     # embedded "
        "nats-server, engine, API, this worker",
    ): "test_the_quickstart_worker_against_dev",
    (
        "docs/quickstart.md",
        "# run_worker.py: beside `uv run dagnats dev`, in a shell where "
        "its `export DAGNATS_NATS_URL=...`",
    ): "test_the_quickstart_worker_against_dev",
    (
        "docs/quickstart.md",
        "uv run dagnats workflow register examples/agent_turn.json      "
        '# the workflow "agent-turn"',
    ): "test_the_quickstart_walkthrough",
    ("docs/nats-client.md", "import trio"): "tests/nats_client/test_docs.py",
    (
        "docs/upgrading.md",
        'uv run dagnats journal export "$RUN" agent > tests/golden/agent.jsonl',
    ): "tests/cli/test_golden.py (the golden fixture)",
    (
        "docs/testing.md",
        "# my_agent.py",
    ): "tests/crashtest/test_crash_test.py::test_the_testing_doc_example_runs_as_a_user_would",
    (
        "docs/testing.md",
        "# test_my_agent.py",
    ): "tests/crashtest/test_crash_test.py::test_the_testing_doc_example_runs_as_a_user_would",
    (
        "docs/concepts.md",
        "# parallel_agent.py",
    ): "tests/crashtest/test_crash_test.py::test_the_concepts_doc_group_example_runs",
    (
        "docs/concepts.md",
        "# test_parallel_agent.py",
    ): "tests/crashtest/test_crash_test.py::test_the_concepts_doc_group_example_runs",
    (
        "docs/upgrading.md",
        "from dagnats_trio.testing import replay_golden",
    ): "tests/cli/test_golden.py::test_the_upgrading_doc_example_runs",
    ("docs/nats-client.md", "import ssl"): "tests/nats_client/test_docs.py",
    ("docs/nats-client.md", "import os"): "tests/nats_client/test_docs.py",
    ("docs/jetstream.md", "import secrets"): "tests/transport/test_jetstream_doc.py",
    ("docs/nats-client.md", "import secrets"): "tests/nats_client/test_docs.py",
    (
        "docs/nats-client.md",
        "from dagnats_trio.transport import NatsTransport, TrioNatsTransport, open_nats_transport",
    ): "tests/nats_client/test_docs.py",
    (
        "docs/nats-client.md",
        "from dagnats_trio.nats import",
    ): "tests/nats_client/test_docs.py",
}

#: Blocks no test here runs, and why.
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "./uvw run --no-dev dagnats demo"): (
        "the two commands: .ci/run runs the test command (test_ci_runs_the_readme_test_command), "
        "tests/cli/test_demo.py the demo"
    ),
    ("docs/quickstart.md", "./uvw run --no-dev dagnats demo"): "the README's two commands",
    (
        "README.md",
        "uv run dagnats dev --worker examples.agent_turn:handlers        # everything,"
        " on an embedded server",
    ): "run by test_the_quickstart_walkthrough (same command)",
    ("README.md", "uv run just lint     # ruff + mypy --strict"): "the project's own tasks",
    (
        "docs/operations.md",
        "uv run dagnats dev --data-dir ./.dagnats --listen 127.0.0.1:8080 "
        "--worker myagent:handlers",
    ): "a fixed port; tests/cli/test_dev.py runs dev with a data dir",
    ("docs/operations.md", "uv run nats-server -c nats.conf"): "a server on the fixed port 4222",
    (
        "docs/operations.md",
        "uv run nats-server -c n1.conf     # on each node, with its own file",
    ): "a 3-node cluster on three machines",
    (
        "docs/operations.md",
        "uv run dagnats run purge $RUN            # exit 0 purged, 1 still running, 3 unknown",
    ): "tests/cli/test_purge.py",
    (
        "docs/operations.md",
        "export DAGNATS_API_TOKEN=$(openssl rand -hex 24)",
    ): "tests/cli/test_verbs.py runs the verbs with a token",
}


def _listed(key: tuple[str, str], table: dict[tuple[str, str], str]) -> bool:
    """A table names a block by its file and the start of its first line."""
    return any(key[0] == f and key[1].startswith(start) for f, start in table)


def test_every_block_is_run_or_listed() -> None:
    found = [b.key for b in blocks("python", "sh")]
    missing = [k for k in found if not _listed(k, RUN) and not _listed(k, NOT_RUN)]
    assert not missing, f"code blocks no test runs (add them to RUN or NOT_RUN): {missing}"
    stale = [
        (f, start)
        for f, start in [*RUN, *NOT_RUN]
        if not any(f == bf and line.startswith(start) for bf, line in found)
    ]
    assert not stale, f"listed blocks that no longer exist: {stale}"
    ran = sum(_listed(k, RUN) for k in found)
    print(f"{len(found)} blocks: {ran} run by tests, {len(found) - ran} listed as not run")


def _dagnats_bin() -> str:
    return str(Path(sys.executable).parent)


def _exports(dev: DevProcess) -> dict[str, str]:
    """What the banner's ``export ...`` line sets."""
    line = dev.banner["other shells"]
    assert line.startswith("export "), line
    return dict(item.split("=", 1) for item in line.removeprefix("export ").split())


def _shell(script: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A documented shell block with ``uv run X`` meaning X of this virtualenv."""
    prelude = 'uv() { if [ "$1" = run ]; then shift; fi; "$@"; }\nset -euo pipefail\n'
    return subprocess.run(
        ["bash", "-c", prelude + script],
        cwd=cwd,
        env={**os.environ, **env, "PATH": f"{_dagnats_bin()}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=SHELL_BLOCK_TIMEOUT_S,
    )


@pytest.fixture
def dev_in(tmp_path: Path) -> Iterator[tuple[Path, list[DevProcess]]]:
    started: list[DevProcess] = []
    try:
        yield tmp_path, started
    finally:
        for dev in started:
            dev.stop()


def test_the_readme_worker_against_dev(tmp_path: Path) -> None:
    worker = block("README.md", next(k[1] for k in RUN if k[1].startswith("# worker.py")))
    (tmp_path / "worker.py").write_text(worker.text)
    (tmp_path / "notify.json").write_text(
        '{"name": "notify", "steps": [{"id": "agent", "task": "agent"}]}'
    )
    dev = start_dev(["--listen", "127.0.0.1:0"], cwd=tmp_path)
    try:
        env = _exports(dev)
        assert env["DAGNATS_NATS_URL"] == dev.nats_url and env["DAGNATS_API_URL"] == dev.api_url
        program = start_program(tmp_path / "worker.py", cwd=tmp_path, env=env)
        try:
            program.wait_for("worker for task type 'agent'", PROGRAM_START_TIMEOUT_S)
            done = _shell(
                "uv run dagnats workflow register notify.json\n"
                "uv run dagnats run start notify '\"hello\"' --watch\n",
                cwd=tmp_path,
                env=env,
            )
        finally:
            rc = program.interrupt()
        print(done.stdout)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "completed" in done.stdout
        assert rc == 0 and "Traceback" not in program.text, program.text
    finally:
        assert dev.stop() == 0


def test_the_quickstart_worker_against_dev(tmp_path: Path) -> None:
    module = block("docs/quickstart.md", "# myagent.py")
    runner = block("docs/quickstart.md", next(k[1] for k in RUN if k[1].startswith("# run_w")))
    (tmp_path / "myagent.py").write_text(module.text)
    (tmp_path / "run_worker.py").write_text(runner.text)
    (tmp_path / "wf.json").write_text('{"name": "qs", "steps": [{"id": "agent", "task": "agent"}]}')
    # the documented `dev --worker myagent:handlers`, on free ports
    dev = start_dev(["--worker", "myagent:handlers", "--listen", "127.0.0.1:0"], cwd=tmp_path)
    try:
        env = _exports(dev)
        program = start_program(tmp_path / "run_worker.py", cwd=tmp_path, env=env)
        try:
            program.wait_for("Ctrl-C stops", PROGRAM_START_TIMEOUT_S)
            done = _shell(
                "uv run dagnats workflow register wf.json\n"
                "uv run dagnats run start qs '\"hi\"' --watch --json\n",
                cwd=tmp_path,
                env=env,
            )
        finally:
            rc = program.interrupt()
        assert done.returncode == 0, done.stdout + done.stderr
        assert '"completed"' in done.stdout and "re: hi" in done.stdout
        assert rc == 0 and "Traceback" not in program.text, program.text
    finally:
        assert dev.stop() == 0


def test_the_quickstart_walkthrough() -> None:
    walk = block("docs/quickstart.md", next(k[1] for k in RUN if "examples/agent_turn" in k[1]))
    dev = start_dev(
        ["--worker", "examples.agent_turn:handlers", "--listen", "127.0.0.1:0"], cwd=ROOT
    )
    try:
        env = _exports(dev)
        done = _shell(walk.text, cwd=ROOT, env=env)
        print(done.stdout[-2000:])
        assert done.returncode == 0, done.stdout + done.stderr
        assert "journal ok" in done.stdout
        # a bad input fails the run at once, with a message that says what the agent takes
        bad = _shell("uv run dagnats run start agent-turn '{}' --watch", cwd=ROOT, env=env)
        assert bad.returncode == 1, bad.stdout + bad.stderr
        assert "must be a prompt" in bad.stdout + bad.stderr
    finally:
        assert dev.stop() == 0


def test_ci_runs_the_readme_test_command_and_the_demo_skips_dev_tools() -> None:
    import tomllib

    first = block("README.md", "./uvw run --no-dev dagnats demo").text.strip().splitlines()
    quick = block("docs/quickstart.md", "./uvw run --no-dev dagnats demo").text.strip()
    commands = [line.split("#", 1)[0].strip() for line in first]
    assert commands == ["./uvw run --no-dev dagnats demo", "./uvw run just test"]
    assert [line.split("#", 1)[0].strip() for line in quick.splitlines()] == commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert commands[1] in [line.strip() for line in ci if not line.startswith("#")]
    assert "pip install" not in (ROOT / ".ci" / "run").read_text()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = " ".join(project["project"]["dependencies"])
    for tool in ("pytest", "mypy", "ruff", "rust-just", "hypothesis"):
        assert tool not in deps
        assert any(d.startswith(tool) for d in project["dependency-groups"]["dev"])
    assert os.access(ROOT / "uvw", os.X_OK)
