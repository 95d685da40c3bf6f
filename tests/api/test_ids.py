"""Ids on every route (issue 9): a bad id is a 400 naming its field, any other id round-trips.

Every id that reaches a subject or a key is checked by one full-match validator, so ``"noop\\n"``
(which ``re.match`` with ``$`` let through) is refused at registration and on every route. A
request id is not a token: chat systems use dots, colons and more, so it is encoded into the
key, and any printable id of up to 128 characters comes back as it was sent.
"""

from __future__ import annotations

import re
import unicodedata
import urllib.parse
from typing import Any

import trio
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dagnats_trio.protocol import layout

from ._stack import ECHO_TASK, ECHO_WORKFLOW, IDLE_WORKFLOW, RUN_FINISH_S, Stack, error_code, unique
from ._stack import idle_run as start_idle_run

#: The rules as docs/rest.md states them, written out again as the tests' oracle.
TOKEN_RULE = re.compile(r"[A-Za-z0-9_-]{1,128}")
REQUEST_ID_REFUSED = {"Cc", "Cs", "Zl", "Zp"}
#: Generated ids sent through the API (each a registration, a run and an input): the rules
#: themselves are checked on 200 examples per property in tests/test_ids.py, pure.
MAX_EXAMPLES = 100
#: Ids refused everywhere an id goes; the first two are the issue's own.
BAD_IDS = ("noop\n", "x\n", "a.b", "a b", "*", "x>", "é", "x" * 129)
BAD_REQUEST_IDS = ("a\nb", "\x00", "\x7f", "\x85", "\u2028", "x" * 129)
CHAT_REQUEST_IDS = (
    "slack:C024BE91L:1700000000.000200",
    "discord.123.456",
    "a*b>c",
    "two words",
    " padded ",
    "émoji 👋",
    "中文",
    ".",
    "..",
    "a/b",
    "50%",
    "q?x#y",
    "[red]x[/]",
    "a",
    "=YQ",  # what "a" would encode to if a token id were encoded: it is not
    "x" * 128,
)


def seg(value: str) -> str:
    """One path segment holding ``value`` exactly (dots too, or '..' would be a parent)."""
    return urllib.parse.quote(value, safe="").replace(".", "%2E")


def is_token(s: str) -> bool:
    return TOKEN_RULE.fullmatch(s) is not None


def is_printable_id(s: str) -> bool:
    return 1 <= len(s) <= 128 and not any(unicodedata.category(c) in REQUEST_ID_REFUSED for c in s)


def assert_names_field(r: Any, field: str) -> None:
    assert r.status_code == 400, (field, r.status_code, r.text)
    assert error_code(r) == f"invalid_{field}", r.text
    message = r.json()["error"]["message"]
    assert message.startswith(f"{field} ") and "\n" not in message, message


async def test_a_trailing_newline_is_refused_at_registration(api: Stack) -> None:
    name = unique("ids-reg")
    cases: dict[str, dict[str, Any]] = {
        "task": {"name": name, "steps": [{"id": "a", "task": "noop\n"}]},
        "id": {"name": name, "steps": [{"id": "x\n", "task": ECHO_TASK}]},
        "name": {"name": name + "\n", "steps": [{"id": "a", "task": ECHO_TASK}]},
        "sub_workflow.workflow": {
            "name": name,
            "steps": [{"id": "a", "type": "sub_workflow", "sub_workflow": {"workflow": "c\n"}}],
        },
    }
    for field, doc in cases.items():
        r = await api.client.post("/workflows", json=doc)
        assert r.status_code == 400, (field, r.text)
        assert error_code(r) == "invalid_workflow"
        problems = r.json()["error"]["problems"]
        assert [p["field"] for p in problems] == [field], problems
        assert problems[0]["message"].startswith(f"{field} "), problems
    r = await api.client.get("/workflows")
    assert name not in {w["name"] for w in r.json()["workflows"]}
    r = await api.client.get(f"/workflows/{name}")
    assert r.status_code == 404  # nothing was stored


async def test_bad_ids_are_400_naming_the_field_on_every_route(api: Stack) -> None:
    run_id = await start_idle_run(api)
    submit = {"request_id": "r1", "mode": "steer", "content": 1}
    for bad in BAD_IDS:
        b = seg(bad)
        cases: list[tuple[str, str, Any, str]] = [
            ("GET", f"/workflows/{b}", None, "name"),
            ("POST", "/runs", {"workflow": bad}, "workflow"),
            ("GET", f"/runs/{b}", None, "run_id"),
            ("POST", f"/runs/{b}/cancel", None, "run_id"),
            ("DELETE", f"/runs/{b}", None, "run_id"),
            ("POST", f"/runs/{b}/signal/go", None, "run_id"),
            ("POST", f"/runs/{run_id}/signal/{b}", None, "name"),
            ("POST", f"/runs/{b}/steps/agent/inputs", submit, "run_id"),
            ("POST", f"/runs/{run_id}/steps/{b}/inputs", submit, "step_id"),
            ("GET", f"/runs/{b}/steps/agent/inputs/r1", None, "run_id"),
            ("GET", f"/runs/{run_id}/steps/{b}/inputs/r1", None, "step_id"),
            ("DELETE", f"/runs/{b}/steps/agent/inputs/r1", None, "run_id"),
            ("DELETE", f"/runs/{run_id}/steps/{b}/inputs/r1", None, "step_id"),
            ("GET", f"/runs/{b}/steps/agent/journal", None, "run_id"),
            ("GET", f"/runs/{run_id}/steps/{b}/journal", None, "step_id"),
        ]
        for method, path, body, field in cases:
            r = await api.client.request(method, path, json=body)
            assert_names_field(r, field)
    inputs = f"/runs/{run_id}/steps/agent/inputs"
    for bad in (*BAD_REQUEST_IDS, ""):
        r = await api.client.post(inputs, json={**submit, "request_id": bad})
        assert_names_field(r, "request_id")
        if bad:
            assert_names_field(await api.client.get(f"{inputs}/{seg(bad)}"), "request_id")
            assert_names_field(await api.client.delete(f"{inputs}/{seg(bad)}"), "request_id")
    # Nothing reached the run: it still runs, with no input and no signal.
    assert await api.inputs.list(run_id, "agent") == []
    r = await api.client.get(f"/runs/{run_id}")
    assert r.json()["status"] == "running"


async def test_chat_request_ids_round_trip(api: Stack) -> None:
    run_id = await start_idle_run(api)
    inputs = f"/runs/{run_id}/steps/agent/inputs"
    for n, rid in enumerate(CHAT_REQUEST_IDS):
        r = await api.client.post(inputs, json={"request_id": rid, "mode": "steer", "content": n})
        assert r.status_code == 201, (rid, r.text)
        assert r.json()["request_id"] == rid
    for n, rid in enumerate(CHAT_REQUEST_IDS):
        r = await api.client.get(f"{inputs}/{seg(rid)}")
        assert r.status_code == 200, (rid, r.text)
        assert (r.json()["request_id"], r.json()["content"]) == (rid, n)
        # A repeat is deduplicated on the encoded key: the original comes back.
        r = await api.client.post(inputs, json={"request_id": rid, "mode": "steer", "content": -1})
        assert (r.status_code, r.json()["content"]) == (200, n), rid
    listed = await api.inputs.list(run_id, "agent")
    assert [s.request_id for s in listed] == list(CHAT_REQUEST_IDS)
    r = await api.client.delete(f"{inputs}/{seg('a/b')}")
    assert r.status_code == 204, r.text
    r = await api.client.get(f"{inputs}/{seg('a/b')}")
    assert r.json()["status"] == "withdrawn"
    r = await api.client.get(f"{inputs}/{seg('..')}")
    assert r.json()["status"] == "queued"  # '..' is not '.' nor the parent path
    # An id that was valid before keeps its key, so stores written earlier are still found.
    entry = await api.transport.kv_get(layout.INPUTS_BUCKET, f"{run_id}.agent.a")
    assert entry is not None and entry.value is not None


#: Mostly near-misses of a token, so both outcomes are common.
id_candidates = st.one_of(
    st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True),
    st.tuples(
        st.from_regex(r"[A-Za-z0-9_-]{0,6}", fullmatch=True),
        st.sampled_from(["\n", "\r", ".", ":", "*", ">", " ", "/", "é", "👋", "\x00", "\u2028"]),
        st.from_regex(r"[A-Za-z0-9_-]{0,6}", fullmatch=True),
    ).map("".join),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=10),
    st.just("x" * 128),
    st.just("x" * 129),
)


async def test_any_string_is_refused_with_400_or_round_trips(api: Stack) -> None:
    """As a workflow name, step id, run input key and request id: 400 naming the field, or
    registered, run to completion and read back equal."""
    idle = await start_idle_run(api)
    counts = {"round_trips": 0, "refused": 0, "request_ids_kept": 0, "request_ids_refused": 0}

    async def through_a_run(s: str) -> None:
        r = await api.client.post(
            "/workflows", json={"name": s, "steps": [{"id": s, "task": ECHO_TASK}]}
        )
        if not is_token(s):
            assert r.status_code == 400, (s, r.text)
            assert error_code(r) == "invalid_workflow"
            assert {p["field"] for p in r.json()["error"]["problems"]} == {"name", "id"}
            r = await api.client.post("/runs", json={"workflow": s, "input": {s: s}})
            assert r.status_code == 400 and error_code(r) == "invalid_workflow", (s, r.text)
            counts["refused"] += 1
            return
        assert r.status_code == 201, (s, r.text)
        r = await api.client.get(f"/workflows/{seg(s)}")
        assert (r.json()["name"], r.json()["steps"][0]["id"]) == (s, s)
        r = await api.client.post("/runs", json={"workflow": s, "input": {s: s}})
        assert r.status_code == 201, (s, r.text)
        run_id = r.json()["run_id"]
        await api.service.wait_for_run(run_id, RUN_FINISH_S)
        view = (await api.client.get(f"/runs/{run_id}")).json()
        assert (view["workflow"], view["status"], view["input"]) == (s, "completed", {s: s})
        assert [(st["step_id"], st["output"]) for st in view["steps"]] == [(s, {"echo": {s: s}})]
        counts["round_trips"] += 1

    async def as_request_id(s: str) -> None:
        inputs = f"/runs/{idle}/steps/agent/inputs"
        r = await api.client.post(inputs, json={"request_id": s, "mode": "steer", "content": s})
        if not is_printable_id(s):
            assert r.status_code == 400, (s, r.text)
            if not any(unicodedata.category(c) == "Cs" for c in s):
                # (a lone surrogate may be refused by the JSON reader before the id check)
                assert_names_field(r, "request_id")
            counts["request_ids_refused"] += 1
            return
        assert r.status_code in (200, 201), (s, r.text)
        r = await api.client.get(f"{inputs}/{seg(s)}")
        assert r.status_code == 200, (s, r.text)
        assert (r.json()["request_id"], r.json()["content"]) == (s, s)
        counts["request_ids_kept"] += 1

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(s=id_candidates)
    def check(s: str) -> None:
        assume(s not in (ECHO_WORKFLOW, IDLE_WORKFLOW))  # shared by other tests: leave them be
        trio.from_thread.run(through_a_run, s)
        trio.from_thread.run(as_request_id, s)

    await trio.to_thread.run_sync(check)
    print(f"ids: {counts}")
    assert counts["round_trips"] > 0 and counts["refused"] > 0
    assert counts["request_ids_kept"] > 0 and counts["request_ids_refused"] > 0
