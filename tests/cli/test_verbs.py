"""The verbs over the REST API, against a running ``dagnats dev`` (exit codes, --json, output)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import Result

from dagnats_trio.cli import (
    EXIT_CANNOT_CONNECT,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)

from ._dev import DevProcess, start_dev
from ._inproc import invoke

#: Bound of waits on a run's state in these tests.
WAIT_S = 15.0
AGENT_WF = "cli-idle-agent"
JOURNAL_WF = "cli-journaled"
CORRUPT_WF = "cli-corrupt"
PAIRED_WF = "cli-paired"
ECHO_WF = "cli-echo"


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevProcess]:
    data = tmp_path_factory.mktemp("dev-data")
    proc = start_dev(
        ["--data-dir", str(data), "--listen", "127.0.0.1:0", "--worker", "_workers:handlers"]
    )
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def cli(dev: DevProcess | None, *args: str) -> Result:
    env = {"DAGNATS_API_URL": dev.api_url if dev else "http://127.0.0.1:1", "COLUMNS": "200"}
    result = invoke(args, env=env)
    out = result.stdout + (result.stderr or "")
    assert "Traceback" not in out, out
    assert result.exception is None or isinstance(result.exception, SystemExit), out
    return result


def as_json(result: Result) -> Any:
    assert result.exit_code == EXIT_OK, result.stdout + result.stderr
    return json.loads(result.stdout)


def register(dev: DevProcess, tmp_path: Path, definition: dict[str, Any]) -> Result:
    path = tmp_path / f"{definition['name']}.json"
    path.write_text(json.dumps(definition))
    return cli(dev, "workflow", "register", str(path))


def wait_run(dev: DevProcess, run_id: str, done: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        run: dict[str, Any] = as_json(cli(dev, "run", "get", run_id, "--json"))
        if done(run):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.05)


def test_workflow_register(dev: DevProcess, tmp_path: Path) -> None:
    ok = register(dev, tmp_path, {"name": ECHO_WF, "steps": [{"id": "e", "task": "cli_echo"}]})
    assert ok.exit_code == EXIT_OK and f"registered workflow {ECHO_WF} (1 step)" in ok.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = cli(dev, "workflow", "register", str(bad))
    assert res.exit_code == EXIT_USAGE and "is not valid JSON" in res.stderr
    res = cli(dev, "workflow", "register", str(tmp_path / "missing.json"))
    assert res.exit_code == EXIT_USAGE and "no such file" in res.stderr
    invalid = {"name": "x", "steps": [{"id": "a", "task": "t", "depends_on": ["nope"]}]}
    res = register(dev, tmp_path, invalid)
    assert res.exit_code == EXIT_USAGE
    assert "nope" in res.stderr  # the problem is listed


def test_run_start_watch_get_cancel(dev: DevProcess, tmp_path: Path) -> None:
    register(dev, tmp_path, {"name": ECHO_WF, "steps": [{"id": "e", "task": "cli_echo"}]})
    started = cli(dev, "run", "start", ECHO_WF, '{"n": 1}', "--watch", "--json")
    run = as_json(started)
    assert run["status"] == "completed" and run["output"] == {"echo": {"n": 1}}
    plain = cli(dev, "run", "start", ECHO_WF, "7")
    assert plain.exit_code == EXIT_OK
    run_id = plain.stdout.strip()
    done = wait_run(dev, run_id, lambda r: r["status"] == "completed")
    assert done["steps"][0]["output"] == {"echo": 7}
    shown = cli(dev, "run", "get", run_id)
    assert shown.exit_code == EXIT_OK and "completed" in shown.stdout and run_id in shown.stdout
    # Cancelling a finished run is refused (409): exit 1 with the reason.
    res = cli(dev, "run", "cancel", run_id)
    assert res.exit_code == EXIT_FAILED and "has already finished (completed)" in res.stderr


def test_run_list_newest_first_and_workflow_list_get(dev: DevProcess, tmp_path: Path) -> None:
    name = f"cli-list-{time.monotonic_ns()}"
    register(dev, tmp_path, {"name": name, "steps": [{"id": "e", "task": "cli_echo"}]})
    started = [cli(dev, "run", "start", name, str(i)).stdout.strip() for i in range(3)]
    for run_id in started:
        wait_run(dev, run_id, lambda r: r["status"] == "completed")
    listed = as_json(cli(dev, "run", "list", "--workflow", name, "--json"))
    assert [r["run_id"] for r in listed] == started[::-1]
    created = [r["created_at_ms"] for r in listed]
    assert created == sorted(created, reverse=True)
    table = cli(dev, "run", "list", "--workflow", name)
    assert table.exit_code == EXIT_OK and all(r in table.stdout for r in started)
    assert cli(dev, "run", "list", "--workflow", "no-such-wf").stdout.strip() == "no runs"
    names = [w["name"] for w in as_json(cli(dev, "workflow", "list", "--json"))]
    assert name in names
    assert name in cli(dev, "workflow", "list").stdout
    got = as_json(cli(dev, "workflow", "get", name))
    assert got["name"] == name and got["steps"][0]["task"] == "cli_echo"
    missing = cli(dev, "workflow", "get", "no-such-wf")
    assert missing.exit_code == EXIT_NOT_FOUND and "no-such-wf" in missing.stderr


def test_run_errors_have_meaningful_exit_codes(dev: DevProcess) -> None:
    res = cli(dev, "run", "get", "no-such-run")
    assert res.exit_code == EXIT_NOT_FOUND and "does not exist" in res.stderr
    res = cli(dev, "run", "start", "no-such-workflow")
    assert res.exit_code == EXIT_NOT_FOUND
    res = cli(dev, "run", "start", ECHO_WF, "{bad json")
    assert res.exit_code == EXIT_USAGE and "INPUT_JSON is not valid JSON" in res.stderr
    # The one JSON policy holds on the command line too: refused before anything is sent.
    res = cli(dev, "run", "start", ECHO_WF, '{"a": [1, NaN]}')
    assert res.exit_code == EXIT_USAGE
    assert "INPUT_JSON is not valid JSON: INPUT_JSON.a[1]: NaN is not a JSON number" in res.stderr
    res = cli(None, "run", "get", "whatever")
    assert res.exit_code == EXIT_CANNOT_CONNECT and "cannot connect" in res.stderr
    res = cli(dev, "run", "get", "x", "--api", "http://127.0.0.1:1")
    assert res.exit_code == EXIT_CANNOT_CONNECT


def test_an_empty_id_is_refused_not_reported_done(dev: DevProcess) -> None:
    """An empty RUN, STEP, REQUEST_ID or NAME made another path (``DELETE /runs/``), which the
    API answers with a redirect; the verbs took that for success: ``run purge ''`` printed
    "purged run" and ``inputs withdraw r s ''`` "withdrawn", exit 0. Now each is a usage error
    naming the argument, and a redirect is never an answer."""
    cases = [
        (("run", "purge", ""), "RUN"),
        (("inputs", "withdraw", "r", "s", ""), "REQUEST_ID"),
        (("run", "get", ""), "RUN"),
        (("run", "cancel", ""), "RUN"),
        (("workflow", "get", ""), "NAME"),
        (("journal", "check", ""), "RUN"),
        (("journal", "tail", "r", ""), "STEP"),
        (("inputs", "get", "r", "s", ""), "REQUEST_ID"),
    ]
    for args, what in cases:
        res = cli(dev, *args)
        assert res.exit_code == EXIT_USAGE, (args, res.stdout, res.stderr)
        assert res.stderr.strip() == f"error: {what} must not be empty", (args, res.stderr)
        assert res.stdout == "", (args, res.stdout)


def test_inputs_send_get_withdraw(dev: DevProcess, tmp_path: Path) -> None:
    # No worker serves this task type, so the agent step stays running and accepts inputs.
    register(
        dev,
        tmp_path,
        {
            "name": AGENT_WF,
            "steps": [
                {
                    "id": "agent",
                    "task": "cli_nobody",
                    "type": "agent_loop",
                    "agent_loop": {"max_iterations": 3},
                }
            ],
        },
    )
    run_id = cli(dev, "run", "start", AGENT_WF).stdout.strip()
    wait_run(dev, run_id, lambda r: r["steps"][0]["status"] == "running")
    send = ["inputs", "send", run_id, "agent", "--request-id", "m1", "--mode", "steer"]
    sub = as_json(cli(dev, *send, '{"text": "hi"}', "--json"))
    assert sub["status"] == "queued" and sub["content"] == {"text": "hi"}
    again = cli(dev, *send, '{"text": "other"}')
    assert again.exit_code == EXIT_OK and "already submitted" in again.stdout
    got = as_json(cli(dev, "inputs", "get", run_id, "agent", "m1", "--wait", "100ms", "--json"))
    assert got["status"] == "queued" and got["content"] == {"text": "hi"}
    assert cli(dev, "inputs", "withdraw", run_id, "agent", "m1").exit_code == EXIT_OK
    got = as_json(cli(dev, "inputs", "get", run_id, "agent", "m1", "--json"))
    assert got["status"] == "withdrawn"
    res = cli(dev, "inputs", "get", run_id, "agent", "nope")
    assert res.exit_code == EXIT_NOT_FOUND
    res = cli(dev, *send[:-1], "loud", "{}")
    assert res.exit_code == EXIT_USAGE  # not a mode
    res = cli(dev, "inputs", "send", run_id, "agent", "--request-id", "m2", "--mode", "steer", "{")
    assert res.exit_code == EXIT_USAGE and "CONTENT_JSON is not valid JSON" in res.stderr
    res = cli(dev, "inputs", "get", run_id, "agent", "m1", "--wait", "soon")
    assert res.exit_code == EXIT_USAGE
    assert cli(dev, "run", "cancel", run_id).exit_code == EXIT_OK


def test_inputs_request_ids_from_chat_systems(dev: DevProcess, tmp_path: Path) -> None:
    """Dots, colons, wildcards, spaces, slashes, markup and unicode are kept; a control
    character is a one-line error naming ``request_id``."""
    register(
        dev,
        tmp_path,
        {
            "name": AGENT_WF,
            "steps": [
                {
                    "id": "agent",
                    "task": "cli_nobody",
                    "type": "agent_loop",
                    "agent_loop": {"max_iterations": 3},
                }
            ],
        },
    )
    run_id = cli(dev, "run", "start", AGENT_WF).stdout.strip()
    wait_run(dev, run_id, lambda r: r["steps"][0]["status"] == "running")
    for rid in ("slack:C024BE91L:1700.0002", "a*b>c d", "émoji 👋", "a/b", "..", "[bold]x[/]"):
        send = ["inputs", "send", run_id, "agent", '"hi"', "--request-id", rid, "--mode", "steer"]
        res = cli(dev, *send)
        assert res.exit_code == EXIT_OK, (rid, res.stdout, res.stderr)
        assert f"input {rid} accepted" in res.stdout, res.stdout
        got = as_json(cli(dev, "inputs", "get", run_id, "agent", rid, "--json"))
        assert (got["request_id"], got["status"]) == (rid, "queued")
        shown = cli(dev, "inputs", "get", run_id, "agent", rid)
        assert shown.exit_code == EXIT_OK and rid in shown.stdout
    assert cli(dev, "inputs", "withdraw", run_id, "agent", "a/b").exit_code == EXIT_OK
    got = as_json(cli(dev, "inputs", "get", run_id, "agent", "a/b", "--json"))
    assert got["status"] == "withdrawn"
    for bad in ("a\nb", "tab\there", "x" * 129):
        send = ["inputs", "send", run_id, "agent", "1", "--request-id", bad, "--mode", "steer"]
        res = cli(dev, *send)
        assert res.exit_code == EXIT_USAGE, (bad, res.stdout, res.stderr)
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "request_id" in lines[0], res.stderr
    assert cli(dev, "run", "cancel", run_id).exit_code == EXIT_OK


def test_journal_tail_and_check(dev: DevProcess, tmp_path: Path) -> None:
    register(dev, tmp_path, {"name": JOURNAL_WF, "steps": [{"id": "j", "task": "cli_journaled"}]})
    run = as_json(cli(dev, "run", "start", JOURNAL_WF, "21", "--watch", "--json"))
    assert run["status"] == "completed" and run["output"] == 42
    run_id = run["run_id"]

    lines = cli(dev, "journal", "tail", run_id, "j", "--json").stdout.splitlines()
    types = [json.loads(line)["type"] for line in lines]
    assert types == ["claim", "tool.intent", "tool.result", "commit"]
    table = cli(dev, "journal", "tail", run_id, "j")
    assert table.exit_code == EXIT_OK and "double(21) safe" in table.stdout
    followed = cli(dev, "journal", "tail", run_id, "j", "--follow")
    assert followed.exit_code == EXIT_OK
    assert "tool.result" in followed.stdout and "the journal is complete" in followed.stdout
    assert cli(dev, "journal", "tail", run_id, "nope").exit_code == EXIT_NOT_FOUND

    checked = cli(dev, "journal", "check", run_id)
    assert checked.exit_code == EXIT_OK
    assert "j: journal ok: 4 records, 1 commits, 1 ended" in checked.stdout
    report = as_json(cli(dev, "journal", "check", run_id, "--json"))
    assert report["ok"] is True and report["steps"][0]["violations"] == []
    assert cli(dev, "journal", "check", "no-such-run").exit_code == EXIT_NOT_FOUND


def test_journal_tail_and_check_read_each_record_of_a_message(
    dev: DevProcess, tmp_path: Path
) -> None:
    """Records stored together as one message (a pair, a group's intents) are shown one by one,
    at the message's sequence, by the timeline, its follow (the SSE ids resume inside a
    message) and the check."""
    register(dev, tmp_path, {"name": PAIRED_WF, "steps": [{"id": "p", "task": "cli_paired"}]})
    run = as_json(cli(dev, "run", "start", PAIRED_WF, "21", "--watch", "--json"))
    assert run["status"] == "completed" and run["output"] == [84, 2], run
    run_id = run["run_id"]
    lines = cli(dev, "journal", "tail", run_id, "p", "--json").stdout.splitlines()
    entries = [(json.loads(line)["seq"], json.loads(line)["type"]) for line in lines]
    seqs = sorted({seq for seq, _ in entries})
    # claim, model + intent, result, the two intents, a result, a result, commit
    assert len(seqs) == 7
    assert [t for _, t in entries] == ["claim", "model", "tool.intent", "tool.result",
        "tool.intent", "tool.intent", "tool.result", "tool.result", "commit"]  # fmt: skip
    assert entries[1][0] == entries[2][0] and entries[4][0] == entries[5][0]
    followed = cli(dev, "journal", "tail", run_id, "p", "--follow", "--json")
    assert followed.exit_code == EXIT_OK
    assert [json.loads(line)["type"] for line in followed.stdout.splitlines()[:9]] == [
        t for _, t in entries
    ]
    table = cli(dev, "journal", "tail", run_id, "p")
    assert table.exit_code == EXIT_OK and table.stdout.count("tool.intent") == 3
    checked = cli(dev, "journal", "check", run_id)
    assert checked.exit_code == EXIT_OK, checked.stdout
    assert "p: journal ok: 9 records, 1 commits, 1 ended" in checked.stdout


def test_journal_check_fails_on_a_violation(dev: DevProcess, tmp_path: Path) -> None:
    register(dev, tmp_path, {"name": CORRUPT_WF, "steps": [{"id": "c", "task": "cli_corrupt"}]})
    run = as_json(cli(dev, "run", "start", CORRUPT_WF, "--watch", "--json"))
    checked = cli(dev, "journal", "check", run["run_id"])
    assert checked.exit_code == EXIT_FAILED
    assert "result-without-intent" in checked.stdout
    report = json.loads(cli(dev, "journal", "check", run["run_id"], "--json").stdout)
    assert report["ok"] is False


def test_json_errors_are_json(dev: DevProcess) -> None:
    missing = cli(dev, "run", "get", "no-such-run", "--json")
    assert missing.exit_code == EXIT_NOT_FOUND
    error = json.loads(missing.stdout)["error"]
    assert error["status"] == 404 and error["exit_code"] == EXIT_NOT_FOUND
    assert "no-such-run" in error["message"] and error["code"]
    bad = cli(dev, "run", "start", ECHO_WF, "{not json", "--json")
    assert bad.exit_code == EXIT_USAGE
    assert json.loads(bad.stdout)["error"]["code"] == "usage"
    down = cli(None, "run", "get", "x", "--json")
    assert down.exit_code == EXIT_CANNOT_CONNECT
    assert json.loads(down.stdout)["error"]["code"] == "cannot_connect"
    # without --json the error stays one line of text on stderr
    text = cli(dev, "run", "get", "no-such-run")
    assert text.exit_code == EXIT_NOT_FOUND and text.stdout == "" and "error:" in text.stderr


#: Generated command lines of the verbs over the API (ids, JSON, options), each run in process.
CLI_FUZZ_EXAMPLES = 100
argv_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=12
)
some_id = st.one_of(
    st.from_regex(r"[a-z0-9_-]{1,16}", fullmatch=True),  # an id, of nothing that exists
    st.sampled_from(["", "..", "a/b", "%2e", "-x", "r" * 200]),
    argv_text,
)
some_json = st.one_of(
    st.sampled_from(["{", "NaN", "1e400", '"x"', "[" * 80 + "]" * 80, "@/nonexistent", "@", "{}"]),
    argv_text,
)
modes = st.sampled_from(["steer", "follow_up", "x", ""])


def _line(*parts: str | st.SearchStrategy[str]) -> st.SearchStrategy[tuple[str, ...]]:
    """A command line: words as given, strategies drawn."""
    return st.tuples(*[st.just(p) if isinstance(p, str) else p for p in parts])


verb_lines = st.one_of(
    _line("run", "get", some_id),
    _line("run", "start", some_id, some_json),
    _line("run", "cancel", some_id, "--reason", argv_text),
    _line("run", "purge", some_id),
    _line("run", "list", "--status", argv_text, "--cursor", argv_text),
    _line("run", "list", "--limit", argv_text),
    _line("workflow", "get", some_id),
    _line("inputs", "send", some_id, some_id, some_json, "--mode", modes, "--request-id", some_id),
    _line("inputs", "get", some_id, some_id, some_id, "--wait", argv_text),
    _line("inputs", "withdraw", some_id, some_id, some_id),
    _line("journal", "tail", some_id, some_id, "--from", argv_text),
    _line("journal", "check", some_id),
    _line("journal", "export", some_id, some_id),
)


def test_generated_command_lines_fail_in_one_line(dev: DevProcess) -> None:
    """Generated ids, JSON and options for every verb over the API, against a running dev:
    no traceback, an exit code of the contract, and a failure said in one ``error:`` line (or
    the usage block of a bad option, exit 2)."""
    codes: dict[int, int] = {}

    @settings(
        max_examples=CLI_FUZZ_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(line=verb_lines)
    def example(line: tuple[str, ...]) -> None:
        res = cli(dev, *line)
        codes[res.exit_code] = codes.get(res.exit_code, 0) + 1
        where = (line, res.exit_code, res.stdout[-300:], res.stderr[-300:])
        assert res.exit_code in (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND), where
        if res.exit_code == EXIT_OK:
            return
        lines = res.stderr.strip().splitlines()
        if res.exit_code == EXIT_USAGE and lines and lines[0].startswith("Usage:"):
            assert any(x.startswith("Error:") for x in lines), where  # the option parser's
            return
        assert len(lines) == 1 and lines[0].startswith("error: "), where

    example()
    print(f"{CLI_FUZZ_EXAMPLES} command lines; exit codes {dict(sorted(codes.items()))}")
    assert codes.get(EXIT_USAGE, 0) > 0 and codes.get(EXIT_NOT_FOUND, 0) > 0
