"""The console's HTTP side: its static files at /ui/ (public, no data) and the journal check
route it calls (the audit of dagnats_trio.journal.check, over HTTP)."""

from __future__ import annotations

import re
from pathlib import Path

from dagnats_trio.api import CONSOLE_PREFIX, console_url
from dagnats_trio.api._console import CONSOLE_DIR
from dagnats_trio.protocol import CommitAction, CommitRecord, ModelRecord

from ._stack import IDLE_WORKFLOW, TOKEN, Stack, error_code
from .test_journal import claim, current_dispatch, model

GOOD = {"Authorization": f"Bearer {TOKEN}"}
CONSOLE_FILES = ("index.html", "console.js", "console.css")
DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_console_doc_shows_the_screenshots_the_browser_tests_take() -> None:
    text = (DOCS / "console.md").read_text(encoding="utf-8")
    shots = re.findall(r"\]\((console/[\w.-]+\.png)\)", text)
    names = ["nats-down", "run", "run-waiting", "runs", "step"]
    assert sorted(shots) == sorted(f"console/{name}.png" for name in names)
    for shot in shots:
        assert (DOCS / shot).is_file(), shot
    assert f"`{CONSOLE_PREFIX}/`" in text
    assert "`GET .../journal/check`" in text


async def test_console_files_are_public_and_the_api_still_needs_the_token(
    authed_api: Stack,
) -> None:
    client = authed_api.client
    page = await client.get(f"{CONSOLE_PREFIX}/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="console.js">' in page.text
    for name in CONSOLE_FILES:
        r = await client.get(f"{CONSOLE_PREFIX}/{name}")
        assert r.status_code == 200, name
        assert r.content == (CONSOLE_DIR / name).read_bytes()
    redirect = await client.get(CONSOLE_PREFIX)
    assert redirect.status_code == 308
    assert redirect.headers["location"] == f"{CONSOLE_PREFIX}/"
    # The files are public; no data is: every API route still answers 401 without the token.
    assert (await client.get("/runs")).status_code == 401
    assert (await client.get(f"{CONSOLE_PREFIX}/../runs")).status_code in (401, 404)
    missing = await client.get(f"{CONSOLE_PREFIX}/no-such-file.js")
    assert missing.status_code == 404
    assert console_url("http://h:1") == "http://h:1/ui/"
    assert console_url("http://h:1/", "r1") == "http://h:1/ui/#/runs/r1"


async def test_journal_check_route_gives_the_audits_verdict(authed_api: Stack) -> None:
    client = authed_api.client
    run_id = await idle_run_authed(authed_api)
    await current_dispatch(authed_api, run_id)  # the step runs: iterations are not compared
    path = f"/runs/{run_id}/steps/agent/journal/check"
    assert (await client.get(path)).status_code == 401
    empty = await client.get(path, headers=GOOD)
    assert empty.status_code == 200
    assert empty.json() == {
        "ok": True,
        "summary": "journal ok: 0 records, 0 commits, 0 ended",
        "records": 0,
        "commits": 0,
        "iterations": 0,
        "compared_iterations": False,
        "violations": [],
    }
    await authed_api.append(run_id, "agent", claim())
    await authed_api.append(run_id, "agent", model(0))
    good = (await client.get(path, headers=GOOD)).json()
    assert good["ok"] is True and good["records"] == 2
    # A write under a claim that never appears breaks the fencing rule, at its sequence.
    stray = ModelRecord(iteration=0, attempt=1, claim_id="nobody", call=1, response="x")
    seq = await authed_api.append(run_id, "agent", stray)
    commit = CommitRecord(0, 1, "c1", "n1", CommitAction.CONTINUE)
    await authed_api.append(run_id, "agent", commit)
    await authed_api.append(run_id, "agent", commit)
    bad = (await client.get(path, headers=GOOD)).json()
    assert bad["ok"] is False
    rules = {(v["rule"], v["seq"]) for v in bad["violations"]}
    assert ("unclaimed-write", seq) in rules
    assert any(rule == "duplicate-commit" for rule, _ in rules)
    assert bad["summary"].startswith(f"journal has {len(bad['violations'])} violation(s)")
    # Unknown step and run: 404 with their codes; a query parameter is refused.
    r = await client.get(f"/runs/{run_id}/steps/nope/journal/check", headers=GOOD)
    assert r.status_code == 404 and error_code(r) == "step_not_found"
    r = await client.get("/runs/nope/steps/agent/journal/check", headers=GOOD)
    assert r.status_code == 404 and error_code(r) == "run_not_found"
    r = await client.get(f"{path}?x=1", headers=GOOD)
    assert r.status_code == 400 and error_code(r) == "invalid_query"


async def idle_run_authed(api: Stack) -> str:
    r = await api.client.post("/runs", json={"workflow": IDLE_WORKFLOW}, headers=GOOD)
    assert r.status_code == 201
    return str(r.json()["run_id"])
