"""``dagnats journal check`` tells the truth about a corrupt journal (issue 16, item 3).

Before: for an undecodable record the CLI exited 1 yet printed ``journal ok: ...``, and
``--json`` gave ``"ok": false`` beside ``"summary": "journal ok: ..."`` and ``"violations": []``.
Now the summary, the exit code, the JSON and the REST audit agree, and a record that does not
decode is a violation with its sequence. One case per kind of corruption, each written onto the
journal of a finished run on the real nats-server of a ``dagnats dev``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from dagnats_trio.cli import EXIT_FAILED, EXIT_OK
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    JournalRecord,
    ModelRecord,
    Replay,
    ToolIntentRecord,
    encode_record,
)
from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.transport import open_nats_transport

from ._dev import DevProcess, start_dev
from .test_verbs import as_json, cli, register

WORKFLOW: Final = "check-corruption"
STEP: Final = "j"
#: Bound on one HTTP request to the dev API.
HTTP_TIMEOUT_S: Final = 15.0

#: What is written, from the run's claim and its stored commit body: the bodies to publish.
Writer = Callable[[ClaimRecord, bytes], list[bytes]]


def _enc(rec: JournalRecord) -> bytes:
    return encode_record(rec)


def _fenced_write(claim: ClaimRecord, commit: bytes) -> list[bytes]:
    intruder = ClaimRecord(claim.iteration, claim.attempt, "intruder", claim.nonce)
    late = ModelRecord(claim.iteration, claim.attempt, claim.claim_id, 9, "late")
    return [_enc(intruder), _enc(late)]


def _dangling_intent(claim: ClaimRecord, commit: bytes) -> list[bytes]:
    retry = ClaimRecord(claim.iteration, 2, "retry", "n-retry")
    intent = ToolIntentRecord(claim.iteration, 2, "retry", 0, "charge", 5, Replay.UNSAFE, "k.0.0")
    done = CommitRecord(claim.iteration, 2, "retry", "n-retry", CommitAction.PAUSE, pause_ms=1)
    return [_enc(retry), _enc(intent), _enc(done)]


#: kind -> (bodies to append, the rule expected, index of the body it is found at).
CASES: Final[dict[str, tuple[Writer, str, int]]] = {
    "malformed-json": (lambda c, m: [b'{"type":"claim","iteration":0,"att'], "undecodable", 0),
    "unknown-type": (
        lambda c, m: [b'{"type":"teleport","iteration":0,"attempt":1,"claim_id":"x"}'],
        "undecodable",
        0,
    ),
    "empty-body": (lambda c, m: [b""], "undecodable", 0),
    "json-array": (lambda c, m: [b"[1, 2, 3]"], "undecodable", 0),
    "duplicate-commit": (lambda c, m: [m], "duplicate-commit", 0),  # the very record, again
    "fenced-write": (_fenced_write, "write-after-fenced", 1),
    "dangling-intent": (_dangling_intent, "unanswered-intent", 1),
}


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


def _publish(nats_url: str, run_id: str, bodies: list[bytes]) -> list[int]:
    async def go() -> list[int]:
        async with open_nats_transport(nats_url, name="corrupter") as t:
            return [await t.publish(journal_subject(run_id, STEP), b) for b in bodies]

    return trio.run(go)


def _records(dev: DevProcess, run_id: str) -> list[dict[str, Any]]:
    out = cli(dev, "journal", "tail", run_id, STEP, "--json").stdout.splitlines()
    return [json.loads(line) for line in out]


@pytest.mark.parametrize("kind", list(CASES))
def test_check_reports_each_corruption(dev: DevProcess, tmp_path: Path, kind: str) -> None:
    register(dev, tmp_path, {"name": WORKFLOW, "steps": [{"id": STEP, "task": "cli_journaled"}]})
    run = as_json(cli(dev, "run", "start", WORKFLOW, "21", "--watch", "--json"))
    assert run["status"] == "completed"
    run_id = run["run_id"]
    clean = cli(dev, "journal", "check", run_id)
    assert clean.exit_code == EXIT_OK and "journal ok" in clean.stdout  # the negative case
    entries = _records(dev, run_id)
    claim = ClaimRecord(**{k: v for k, v in entries[0]["record"].items() if k != "type"})
    assert entries[-1]["type"] == "commit"
    write, rule, at = CASES[kind]
    seqs = _publish(dev.nats_url, run_id, write(claim, json.dumps(entries[-1]["record"]).encode()))
    bad_seq = seqs[at]

    text = cli(dev, "journal", "check", run_id)
    report = json.loads(cli(dev, "journal", "check", run_id, "--json").stdout)
    with httpx.Client(base_url=dev.api_url, timeout=HTTP_TIMEOUT_S) as http:
        rest = http.get(f"/runs/{run_id}/steps/{STEP}/journal/check").json()
    print(f"{kind}: seq {bad_seq}: {text.stdout.strip()!r}; rest {rest['summary']!r}")

    assert text.exit_code == EXIT_FAILED
    assert "journal ok" not in text.stdout and f"{STEP}: journal has " in text.stdout
    assert f"[{rule}] seq {bad_seq}: " in text.stdout
    (step,) = report["steps"]
    assert report["ok"] is False and step["ok"] is False
    assert step["summary"].startswith("journal has ") and step["summary"] in text.stdout
    assert any(v.startswith(f"[{rule}] seq {bad_seq}: ") for v in step["violations"])
    assert rest["ok"] is False and rest["summary"] == step["summary"]
    assert {"rule": rule, "seq": bad_seq} in [
        {"rule": v["rule"], "seq": v["seq"]} for v in rest["violations"]
    ]
    assert len(rest["violations"]) == len(step["violations"])
    undecodable = [v for v in step["violations"] if v.startswith("[undecodable]")]
    assert step["undecodable"] == undecodable
    assert bool(undecodable) == (rule == "undecodable")
