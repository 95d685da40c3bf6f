"""``--client`` / ``DAGNATS_CLIENT`` on ``dagnats dev``, ``serve`` and ``worker`` (issue 10):
a bad value is refused in one line (exit 2) naming the accepted values."""

from __future__ import annotations

from pathlib import Path

import pytest

from ._inproc import Exited, refused_by_process, refused_by_processes, refused_in_process

#: The exit code of "cannot connect" (docs/quickstart.md, Exit codes).
EXIT_CANNOT_CONNECT = 4


def _bad_client_refused(out: Exited, value: str) -> None:
    assert out.code == 2, (value, out)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "client must be one of native, nats-py" in lines[0], out.stderr
    assert repr(value) in lines[0], out.stderr


@pytest.mark.parametrize("value", ["asyncio", "nats_py"])
def test_dev_serve_and_worker_refuse_a_bad_client_in_one_line(value: str, tmp_path: Path) -> None:
    runs = [
        refused_in_process(["dev", "--data-dir", str(tmp_path), "--client", value]),
        refused_in_process(["serve", "--nats", "nats://127.0.0.1:1", "--client", value]),
        refused_in_process(
            ["worker", "--nats", "nats://127.0.0.1:1", "_crashing:handlers"],
            env={"DAGNATS_CLIENT": value},
        ),
    ]
    for out in runs:
        _bad_client_refused(out, value)


def test_the_console_script_refuses_what_the_options_refuse(tmp_path: Path) -> None:
    """The refusals of this file are proven in process for every value; here one of each kind
    as a user's shell sees it (exit code, one line on stderr): a bad client to a worker from its
    environment, a blank token to dev (which opens nothing first), a URL that does not parse."""
    worker = ["worker", "--nats", "nats://127.0.0.1:1", "_crashing:handlers"]
    dev = ["dev", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--token", " "]
    serve = ["serve", "--nats", "nats://"]
    client, token, url = refused_by_processes(
        [(worker, {"DAGNATS_CLIENT": "asyncio"}), (dev, None), (serve, None)]
    )
    _bad_client_refused(client, "asyncio")
    _blank_token_refused(token)
    assert not any(tmp_path.iterdir()), "dev started before it refused the token"
    _bad_url_refused(url, "nats://", "names no host")


def test_serve_dev_and_worker_with_no_server_answering_say_so_in_one_line() -> None:
    """A NATS URL nothing answers on: one line and exit 4, as with ``--client nats-py``. (The
    native client, the default, printed a 100-line traceback of its ``NoServersError``.)"""
    nowhere = "nats://127.0.0.1:1"
    env = {"DAGNATS_CLIENT": "native"}
    runs = refused_by_processes(
        [
            (["serve", "--nats", nowhere, "--listen", "127.0.0.1:0"], env),
            (["dev", "--nats", nowhere, "--listen", "127.0.0.1:0"], env),
            (["worker", "--nats", nowhere, "_crashing:handlers"], env),
        ]
    )
    for out in runs:
        assert out.code == EXIT_CANNOT_CONNECT, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith("error: cannot connect to NATS: "), out.stderr
        assert "127.0.0.1:1" in lines[0], out.stderr


def test_a_verb_with_an_api_url_that_is_no_url_says_so_in_one_line() -> None:
    """``--api`` that httpx cannot parse: one line, exit 2 (before, a traceback of
    ``httpx.InvalidURL``, which is no ``httpx.HTTPError``)."""
    out = refused_in_process(["run", "get", "abc", "--api", "http://[::1"])
    assert out.code == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: --api 'http://[::1' is not a URL"), out.stderr


@pytest.mark.parametrize("token", ["", "  ", "two words"])
def test_serve_and_dev_refuse_an_empty_or_blank_token_in_one_line(
    token: str, tmp_path: Path
) -> None:
    """``--token "$TOKEN"`` with ``TOKEN`` unset served an open API (the empty token was taken
    as none, on whatever ``--listen`` said); now it is refused before anything starts."""
    runs = [
        refused_in_process(
            ["serve", "--nats", "nats://127.0.0.1:1", "--listen", "0.0.0.0:0", "--token", token]
        ),
        refused_in_process(
            ["dev", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--token", token]
        ),
    ]
    for out in runs:
        _blank_token_refused(out)
    assert not any(tmp_path.iterdir()), "dev started before it refused the token"


def _blank_token_refused(out: Exited) -> None:
    assert out.code == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: --token "), out.stderr


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--ack-wait", "inf"),
        ("--ack-wait", "1e12"),
        ("--nats-port", "70000"),
        ("--nats-port", "-5"),
    ],
)
def test_out_of_range_ack_wait_and_nats_port_are_refused(
    option: str, value: str, tmp_path: Path
) -> None:
    """``--ack-wait inf`` failed the start with a traceback (the worker's own check, inside the
    running host), ``--nats-port 70000`` with an ``OverflowError`` from ``bind``, and
    ``--nats-port -5`` was taken for any port; now each is refused by the option (exit 2)."""
    dev = ["dev", "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", option, value]
    runs = [refused_in_process(dev)]
    if option == "--ack-wait":
        runs.append(refused_in_process(["serve", "--nats", "nats://127.0.0.1:1", option, value]))
        runs.append(
            refused_in_process(["worker", "--nats", "nats://127.0.0.1:1", option, value, "m:h"])
        )
    for out in runs:
        assert out.code == 2, out
        assert "Traceback" not in out.stderr, out.stderr
        assert f"Invalid value for '{option}'" in out.stderr, out.stderr
    assert not any(tmp_path.iterdir()), "dev started before it refused the option"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("nats://[::1", "is not valid: Invalid IPv6 URL"),
        ("nats://127.0.0.1:99999", "is not valid: Port out of range"),
        ("nats://", "names no host"),
    ],
)
def test_a_nats_url_that_does_not_parse_is_refused_in_one_line(url: str, says: str) -> None:
    """Before, each failed inside the client with a traceback (``ValueError``)."""
    for args in (["serve", "--nats", url], ["worker", "--nats", url, "_crashing:handlers"]):
        _bad_url_refused(refused_in_process(args), url, says)


def _bad_url_refused(out: Exited, url: str, says: str) -> None:
    assert out.code == 2, out
    assert out.stderr.startswith(f"error: NATS URL {url!r} {says}"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_a_data_dir_that_is_a_file_is_named_as_the_problem(tmp_path: Path) -> None:
    """A ``--data-dir`` that is a file was reported as "cannot listen on 127.0.0.1:0: Not a
    directory"; the message names the path now."""
    file = tmp_path / "afile"
    file.write_text("not a directory\n")
    out = refused_by_process(["dev", "--data-dir", str(file), "--listen", "127.0.0.1:0"])
    assert out.code == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1] == f"error: cannot use {file}/jetstream: Not a directory", out.stderr
    assert "Traceback" not in out.stderr and "listen" not in lines[-1]
