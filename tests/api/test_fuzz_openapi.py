"""A fuzz of every route, generated from the OpenAPI document the app serves.

For each operation of ``/openapi.json``, Hypothesis draws path parameters (ids that exist, and
junk), the documented query and header parameters (in and out of their schema: out-of-range and
non-ASCII digits, unknown values, unknown parameters) and a body built from the operation's
request schema (right shapes with wrong, poisoned or missing values: ``NaN``, ``1e400``, lone
surrogates escaped or raw, huge integers, deep nesting, invalid UTF-8, random bytes). Every answer
must be below 500, come within :data:`REQUEST_HANG_S`, and, when it is an error, be the
documented JSON shape ``{"error": {"code", "message"}}``.

Thousands of requests go in-process to the real app over ASGI (with and without a token; a
token app also gets a wrong or missing token), on a nats-server of the test's own, with the
engine and the worker bridge running; a smaller batch goes over real HTTP through hypercorn.
Hypothesis runs in a worker thread and hands each batch to the test's Trio loop
(``trio.from_thread``), where its requests run concurrently.

A second fuzz sends requests one at a time, adding methods a path does not take and path
segments that climb (``..``, quoted or raw, also under the console's ``/ui/``), and looks at
every stream and bucket before and after each: a request answered 4xx stores nothing, a 400
names a parameter or field of its route, a wrong method is 405 (401 without the token).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote, unquote, urlencode

import attrs
import httpx
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.types import ASGIApp, Message

from dagnats_trio.api import Service
from dagnats_trio.api._rest_openapi import openapi_document
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.bridge import Bridge
from dagnats_trio.engine import Engine
from dagnats_trio.inputs import InputsService
from dagnats_trio.protocol import decode_json
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import Transport, open_nats_transport, provision

from ._stack import IDLE_TASK, IDLE_WORKFLOW, TOKEN, register_workflows

#: Batches (Hypothesis examples) per app in process, and requests per batch (sent at once).
ASGI_BATCHES = 250
BATCH_MAX_REQUESTS = 10
#: Batches sent over real HTTP through hypercorn.
HTTP_BATCHES = 40
#: An answer slower than this is a hang.
REQUEST_HANG_S = 10.0
#: Bounds of the app under test, small so the bounds themselves are exercised.
FUZZ_MAX_BODY_BYTES = 16 * 1024
FUZZ_MAX_WAIT_S = 1.0
FUZZ_POLL_INTERVAL_S = 0.2
FUZZ_BRIDGE_MAX_POLL_S = 1.0
FUZZ_ACK_WAIT_S = 2.0
STACK_START_S = 15.0
#: Requests sent one at a time, each between two snapshots of what NATS stores.
REJECT_EXAMPLES = 400

DOC = openapi_document()
OPERATIONS = tuple(
    (method.upper(), path, op)
    for path, methods in DOC["paths"].items()
    for method, op in methods.items()
)
SCHEMAS: dict[str, Any] = DOC["components"]["schemas"]

# --- generating JSON text, poisoned or not ---------------------------------------------------

#: Number and string spellings Python's parser takes but JSON (or our readers) does not.
POISON = (
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1e999",
    "123456789012345678901234567890",
    '"\\ud800"',
    '"x\\udfff"',
    '"\\udc00\\ud800"',
)
ODD_DIGITS = (
    "²",
    "٣",
    "\uff15",
    "+1",
    " 1",
    "1_0",
    "-1",
    "0x10",
    "1e3",
    "",
    "99999999999999999999",
)

#: Strings that mean something to some route (a workflow, a step, a mode, a task), so generated
#: bodies get past validation some of the time and reach the service and NATS.
KNOWN_STRINGS = (IDLE_WORKFLOW, IDLE_TASK, "agent", "q1", "steer", "follow_up", "model", "x")

plain_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=16),
).map(json.dumps)
scalar_text = st.one_of(plain_scalars, plain_scalars, st.sampled_from(POISON))


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of the strategies, picked with the given weights (``one_of`` leans to the first)."""
    table = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def _object_text(pairs: list[tuple[str, str]]) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in pairs) + "}"


any_json_text = st.recursive(
    scalar_text,
    lambda children: st.one_of(
        st.lists(children, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(st.text(max_size=8), children), max_size=4).map(_object_text),
    ),
    max_leaves=10,
)
deep_text = st.integers(60, 200).map(lambda n: "[" * n + "]" * n)


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return SCHEMAS[ref.rsplit("/", 1)[-1]] if isinstance(ref, str) else schema


def value_text(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[str]:
    """JSON text for ``schema``: usually of its type, sometimes anything or poison."""
    schema = _resolve(schema)
    if depth > 3:
        return scalar_text
    typed: st.SearchStrategy[str]
    if "anyOf" in schema:
        typed = st.one_of([value_text(s, depth + 1) for s in schema["anyOf"]])
    elif "enum" in schema:
        typed = st.sampled_from([json.dumps(v) for v in schema["enum"]])
    elif schema.get("type") == "object" and "properties" in schema:
        typed = object_text(schema, depth)
    elif schema.get("type") == "array":
        items = value_text(schema.get("items", {}), depth + 1)
        typed = st.lists(items, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]")
    elif schema.get("type") == "integer":
        typed = st.one_of(
            st.integers(-5, 2_000), st.integers(-(2**70), 2**70), st.sampled_from(POISON[:6])
        ).map(str)
    elif schema.get("type") == "string":
        typed = weighted((2, st.sampled_from(KNOWN_STRINGS)), (1, st.text(max_size=24))).map(
            json.dumps
        )
    elif schema.get("type") == "boolean":
        typed = st.booleans().map(json.dumps)
    else:
        typed = any_json_text
    return weighted((5, typed), (1, any_json_text))


def object_text(schema: dict[str, Any], depth: int = 0) -> st.SearchStrategy[str]:
    """An object of the schema's properties: each present or not, plus sometimes an unknown key."""
    props: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    fields = []
    for key, sub in props.items():
        present = value_text(sub, depth + 1).map(lambda v, k=key: (k, v))
        fields.append(weighted((6 if key in required else 2, present), (1, st.none())))
    extra = st.lists(st.tuples(st.text(max_size=8), any_json_text), max_size=1)
    return st.tuples(st.tuples(*fields), extra).map(
        lambda t: _object_text([p for p in t[0] if p is not None] + t[1])
    )


def body_bytes(op: dict[str, Any]) -> st.SearchStrategy[bytes]:
    body = op.get("requestBody")
    shaped = value_text(body["content"]["application/json"]["schema"]) if body else any_json_text
    text = weighted((6, shaped), (1, any_json_text), (1, deep_text))
    return weighted(
        (8, text.map(str.encode)),
        (1, st.just(b"")),
        (1, text.map(lambda t: t.encode()[:-1] + b'"\xed\xa0\x80"' if t else b"\xff")),
        (1, st.binary(max_size=48)),
    )


# --- parameters ---------------------------------------------------------------------------


@attrs.frozen
class Known:
    """Ids that exist, so generated requests get past the 404s some of the time."""

    run_id: str
    lease_token: str

    def values(self, name: str) -> list[str]:
        return {
            "run_id": [self.run_id, "no-such-run"],
            "step_id": ["agent", "nope"],
            "request_id": ["q1", "q2"],
            "name": ["go", IDLE_WORKFLOW],
            # Only known task types: a valid new one would make a durable consumer per example.
            "task_type": [IDLE_TASK, "fuzz task!"],
            "token": [self.lease_token, "no-such-lease"],
        }.get(name, ["x"])


def param_value(schema: dict[str, Any]) -> st.SearchStrategy[str]:
    if schema.get("type") == "integer":
        low = int(schema.get("minimum", 0))
        high = int(schema.get("maximum", 10**6))
        return st.one_of(
            st.integers(low, min(high, low + 50)).map(str),
            st.integers(-(10**3), 10**25).map(str),
            st.sampled_from(ODD_DIGITS),
        )
    enum = schema.get("enum")
    junk = st.one_of(st.text(max_size=12), st.sampled_from(ODD_DIGITS))
    if enum:
        return st.one_of(st.sampled_from([str(v) for v in enum]), junk)
    durations = st.sampled_from(["1", "250ms", "1s", "2s", "0", "1h", "9" * 30, "1x", "-1s"])
    return st.one_of(durations, junk)


@attrs.frozen
class Call:
    method: str
    path: str
    template: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    body: bytes
    documented: frozenset[int]


def calls(known: Known, auth: Callable[[], st.SearchStrategy[tuple[tuple[str, str], ...]]]) -> Any:
    @st.composite
    def one(draw: st.DrawFn) -> Call:
        method, template, op = draw(st.sampled_from(OPERATIONS))
        path = template
        query: list[tuple[str, str]] = []
        headers: list[tuple[str, str]] = list(draw(auth()))
        for p in op.get("parameters", []):
            name, where, schema = p["name"], p["in"], p["schema"]
            if where == "path":
                value = draw(
                    st.one_of(st.sampled_from(known.values(name)), st.text(min_size=1, max_size=12))
                )
                path = path.replace("{" + name + "}", quote(value, safe=""))
            elif draw(st.booleans()):
                value = draw(param_value(schema))
                if where == "query":
                    query.append((name, value))
                elif value.isascii() and value.isprintable() and value == value.strip():
                    # HTTP trims a header value's outer whitespace; h11 refuses to send it.
                    headers.append((name, value))
        if draw(st.integers(0, 9)) == 0:
            query.append((draw(st.text(min_size=1, max_size=6)), "1"))
        body = draw(body_bytes(op)) if method in ("POST", "PUT") else b""
        if draw(st.integers(0, 4)) == 0:
            headers.append(
                ("content-type", draw(st.sampled_from(["text/plain", "application/json"])))
            )
        return Call(
            method,
            path,
            template,
            tuple(query),
            tuple(headers),
            body,
            frozenset(int(s) for s in op["responses"]),
        )

    return st.lists(one(), min_size=1, max_size=BATCH_MAX_REQUESTS)


def no_auth() -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    return st.just(())


def token_auth() -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    return st.sampled_from(
        [
            (("authorization", f"Bearer {TOKEN}"),),
            (("authorization", f"Bearer {TOKEN}"),),
            (("authorization", f"Bearer {TOKEN}"),),
            (("authorization", "Bearer wrong"),),
            (),
        ]
    )


#: Path segments that try to climb out of a route or the console's directory, and ids that are
#: no ids (NUL, a right-to-left mark, a long one).
TRAVERSAL = (
    "..",
    ".",
    "../..",
    "../../etc/passwd",
    "..%2F..%2Fpyproject.toml",
    "%2e%2e",
    "a/../b",
    "\x00",
    "run\u202eexe",
    "a" * 300,
)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
PATH_METHODS: dict[str, frozenset[str]] = {}
for _method, _path, _ in OPERATIONS:
    PATH_METHODS[_path] = PATH_METHODS.get(_path, frozenset()) | {_method}


def wrong_method(known: Known) -> st.SearchStrategy[Call]:
    """A documented path with a method it does not take: 405 (401 without the token)."""

    @st.composite
    def one(draw: st.DrawFn) -> Call:
        template = draw(st.sampled_from(sorted(PATH_METHODS)))
        method = draw(st.sampled_from([m for m in METHODS if m not in PATH_METHODS[template]]))
        path = template
        for name in ("run_id", "step_id", "request_id", "name", "task_type", "token"):
            path = path.replace("{" + name + "}", quote(known.values(name)[0], safe=""))
        auth = draw(token_auth())
        body = draw(st.sampled_from([b"", b"{}", b'{"x": 1}']))
        return Call(method, path, template, (), auth, body, frozenset({405}))

    return one()


def traversal(known: Known) -> st.SearchStrategy[Call]:
    """A route whose path parameters climb (quoted or raw), or the console's files."""

    @st.composite
    def one(draw: st.DrawFn) -> Call:
        auth = draw(token_auth())
        value = draw(st.sampled_from(TRAVERSAL))
        if draw(st.integers(0, 3)) == 0:
            path = "/ui/" + value
            return Call("GET", path, "/ui/{file}", (), auth, b"", frozenset({200}))
        method, template, op = draw(st.sampled_from(OPERATIONS))
        raw = draw(st.booleans())
        path = template
        for p in op.get("parameters", []):
            if p["in"] == "path":
                v = value if draw(st.booleans()) else draw(st.sampled_from(known.values(p["name"])))
                path = path.replace("{" + p["name"] + "}", v if raw else quote(v, safe=""))
        body = b"{}" if method in ("POST", "PUT") else b""
        documented = frozenset(int(s) for s in op["responses"])
        return Call(method, path, template, (), auth, body, documented)

    return one()


def one_call(known: Known) -> st.SearchStrategy[Call]:
    return weighted(
        (6, calls(known, token_auth).map(lambda batch: batch[0])),
        (1, wrong_method(known)),
        (2, traversal(known)),
    )


# --- sending --------------------------------------------------------------------------------


@attrs.frozen
class Answer:
    status: int
    content_type: str
    body: bytes


async def asgi_request(app: ASGIApp, call: Call) -> Answer:
    """One request straight into the ASGI app; an event stream is read up to its headers."""
    raw_query = urlencode(call.query).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": call.method,
        "scheme": "http",
        "path": unquote(call.path),
        "raw_path": call.path.encode(),
        "root_path": "",
        "query_string": raw_query,
        "headers": [(k.lower().encode(), v.encode()) for k, v in call.headers],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 80),
    }
    sent_body = False
    done = trio.Event()
    start: dict[str, Any] = {}
    chunks: list[bytes] = []

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": call.body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            if (
                dict(message.get("headers", []))
                .get(b"content-type", b"")
                .startswith(b"text/event-stream")
            ):
                done.set()
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    async with trio.open_nursery() as nursery:

        async def run_app() -> None:
            await app(scope, receive, send)
            done.set()

        nursery.start_soon(run_app)
        await done.wait()
        nursery.cancel_scope.cancel()
    headers = dict(start.get("headers", []))
    return Answer(
        int(start["status"]), headers.get(b"content-type", b"").decode(), b"".join(chunks)
    )


async def http_request(client: httpx.AsyncClient, call: Call) -> Answer:
    headers = [(k.encode(), v.encode()) for k, v in call.headers]
    request = client.build_request(
        call.method, call.path, params=list(call.query), headers=headers, content=call.body
    )
    response = await client.send(request, stream=True)
    try:
        content_type = response.headers.get("content-type", "")
        body = b"" if content_type.startswith("text/event-stream") else await response.aread()
    finally:
        await response.aclose()
    return Answer(response.status_code, content_type, body)


def check(call: Call, answer: Answer, tally: Counter[str]) -> None:
    where = (call.method, call.path, call.query, call.body[:80], answer.status, answer.body[:200])
    assert answer.status < 500, where
    tally[str(answer.status)] += 1
    tally[f"{call.method} {call.template}"] += 1
    if answer.status < 400:
        if answer.content_type.startswith("application/json"):
            decode_json(answer.body, where="answer")  # what is served is JSON by the policy
        return
    assert answer.content_type.startswith("application/json"), where
    body = json.loads(answer.body)
    assert isinstance(body, dict) and set(body) == {"error"}, where
    error = body["error"]
    assert isinstance(error, dict), where
    assert {"code", "message"} <= set(error) <= {"code", "message", "problems"}, where
    assert isinstance(error["code"], str) and error["code"], where
    assert isinstance(error["message"], str) and error["message"], where
    if "problems" in error:
        assert error["code"] == "invalid_workflow", where
    # Routed requests answer a status their operation documents (a junk id with a slash in it
    # may reach no route at all: 404).
    assert answer.status in call.documented or answer.status == 404, where


def requests_in(tally: Counter[str]) -> int:
    """Requests answered so far (the tally counts each by status and by operation)."""
    return sum(count for key, count in tally.items() if key.isdigit())


async def send_batch(send: Callable[[Call], Any], batch: list[Call], tally: Counter[str]) -> None:
    async def one(call: Call) -> None:
        with trio.move_on_after(REQUEST_HANG_S) as scope:
            answer = await send(call)
        assert not scope.cancelled_caught, ("no answer within", REQUEST_HANG_S, call)
        check(call, answer, tally)

    async with trio.open_nursery() as nursery:
        for call in batch:
            nursery.start_soon(one, call)


def fuzz(
    send: Callable[[Call], Any], known: Known, auth: Any, batches: int, tally: Counter[str]
) -> None:
    """Runs in a worker thread: Hypothesis draws batches, the Trio loop sends them."""

    @settings(
        max_examples=batches,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(batch=calls(known, auth))
    def example(batch: list[Call]) -> None:
        trio.from_thread.run(send_batch, send, batch, tally)

    example()


# --- the stack ------------------------------------------------------------------------------


@attrs.frozen
class FuzzStack:
    transport: Transport
    open_app: ASGIApp
    token_app: ASGIApp
    url: str
    known: Known


@asynccontextmanager
async def fuzz_stack(server: NatsServer) -> AsyncIterator[FuzzStack]:
    async with open_nats_transport(server.url, name="pytest-fuzz") as transport:
        await provision(transport)
        service = Service(transport)
        inputs = InputsService(transport)
        await register_workflows(service)
        bridge = Bridge(
            transport,
            ack_wait_s=FUZZ_ACK_WAIT_S,
            max_poll_wait_s=FUZZ_BRIDGE_MAX_POLL_S,
            inputs=inputs,
        )

        def app(token: str | None) -> ASGIApp:
            return create_app(
                service,
                inputs,
                transport,
                token=token,
                max_body_bytes=FUZZ_MAX_BODY_BYTES,
                max_wait_s=FUZZ_MAX_WAIT_S,
                poll_interval_s=FUZZ_POLL_INTERVAL_S,
                bridge=bridge,
            )

        async with trio.open_nursery() as nursery:
            with trio.fail_after(STACK_START_S):
                await nursery.start(Engine(transport, inputs=inputs, legacy_step_events=False).run)
                await nursery.start(bridge.run)
                open_app = app(None)
                url = await nursery.start(ApiServer(app(TOKEN), "127.0.0.1", 0).run)
                async with httpx.AsyncClient(base_url=url) as client:
                    auth = {"authorization": f"Bearer {TOKEN}"}
                    r = await client.post("/runs", json={"workflow": IDLE_WORKFLOW}, headers=auth)
                    run_id = r.json()["run_id"]
                    r = await client.post(
                        f"/bridge/tasks/{IDLE_TASK}/poll", params={"wait": "5s"}, headers=auth
                    )
                    assert r.status_code == 200, r.text
                    lease_token = r.json()["token"]
            yield FuzzStack(transport, open_app, app(TOKEN), url, Known(run_id, lease_token))
            nursery.cancel_scope.cancel()


async def test_every_route_survives_a_fuzz_generated_from_openapi(
    fresh_nats_server: NatsServer,
) -> None:
    tally: Counter[str] = Counter()
    started = trio.current_time()
    async with fuzz_stack(fresh_nats_server) as stack:
        for app, auth in ((stack.open_app, no_auth), (stack.token_app, token_auth)):

            async def send(call: Call, app: ASGIApp = app) -> Answer:
                return await asgi_request(app, call)

            await trio.to_thread.run_sync(fuzz, send, stack.known, auth, ASGI_BATCHES, tally)
        in_process = requests_in(tally)
        async with httpx.AsyncClient(base_url=stack.url, timeout=REQUEST_HANG_S * 2) as client:

            async def send_http(call: Call) -> Answer:
                return await http_request(client, call)

            await trio.to_thread.run_sync(
                fuzz, send_http, stack.known, token_auth, HTTP_BATCHES, tally
            )
    total = requests_in(tally)
    statuses = {k: v for k, v in sorted(tally.items()) if k.isdigit()}
    fewest = min(tally[f"{method} {path}"] for method, path, _ in OPERATIONS)
    print(
        f"fuzz: {total} requests ({in_process} over ASGI, {total - in_process} over HTTP) "
        f"in {trio.current_time() - started:.1f} s; {len(OPERATIONS)} operations, each sent "
        f">= {fewest} times; statuses {statuses}"
    )
    assert in_process >= 1_000
    # Both sides of the token were exercised, and some requests got through every check.
    assert tally["401"] > 0 and tally["400"] > 0
    # Every operation of the document was sent.
    assert all(tally[f"{method} {path}"] > 0 for method, path, _ in OPERATIONS)
    assert tally["200"] + tally["201"] + tally["202"] > 0


# --- rejected requests: the field named, nothing stored -----------------------------------

#: A pause after a request that was answered 2xx, before the next one is sent (the engine
#: applies a started run after the answer); it is repeated until NATS holds still.
SETTLE_S = 0.2
SETTLE_BOUND_S = 10.0
OPS_BY_ROUTE = {(method, path): op for method, path, op in OPERATIONS}


def _schema_names(schema: dict[str, Any], depth: int = 0) -> set[str]:
    schema = _resolve(schema)
    names = set(schema.get("properties", {}))
    if depth < 3:
        for sub in [*schema.get("anyOf", []), *schema.get("properties", {}).values()]:
            names |= _schema_names(sub, depth + 1)
    return names


def field_names(op: dict[str, Any]) -> set[str]:
    """What a 400 of ``op`` may name: its parameters, its body's fields, or the body itself."""
    names = {p["name"] for p in op.get("parameters", [])} | {"body", "query parameter"}
    body = op.get("requestBody")
    if body:
        names |= _schema_names(body["content"]["application/json"]["schema"])
    return names


async def stored(transport: Transport) -> dict[str, tuple[int, int]]:
    """Messages and last sequence of every stream (KV buckets included): what NATS stores.
    One ``STREAM.LIST`` page holds every stream's info (a page is 256 streams; the store has a
    dozen): one round trip where a name list and an info per stream took 13, twice for each of
    the fuzz's examples."""
    out: dict[str, tuple[int, int]] = {}
    while True:
        page = json.loads(
            await transport.request(
                "$JS.API.STREAM.LIST", json.dumps({"offset": len(out)}).encode()
            )
        )
        for info in page["streams"]:
            out[info["config"]["name"]] = (info["state"]["messages"], info["state"]["last_seq"])
        if not page["streams"] or len(out) >= page["total"]:
            return dict(sorted(out.items()))


async def settled(transport: Transport) -> dict[str, tuple[int, int]]:
    """What NATS stores once it holds still for :data:`SETTLE_S`."""
    with trio.fail_after(SETTLE_BOUND_S):
        now = await stored(transport)
        while True:
            await trio.sleep(SETTLE_S)
            again = await stored(transport)
            if again == now:
                return now
            now = again


def check_rejected(call: Call, answer: Answer, tally: Counter[str]) -> None:
    """A client error of a rejected request: the route's own status, and a 400 names what."""
    where = (call.method, call.path, call.body[:80], answer.status, answer.body[:300])
    assert answer.status < 500, where
    tally[str(answer.status)] += 1
    op = OPS_BY_ROUTE.get((call.method, call.template))
    if call.template == "/ui/{file}":
        # The console's files, and nothing above them.
        assert answer.status in (200, 404), where
        if answer.status == 200:
            assert answer.content_type.startswith(("text/", "application/javascript")), where
            assert not answer.content_type.startswith("application/json"), where
        return
    if op is None:  # a method the path does not take
        assert answer.status in (401, 404, 405), where
        tally["405 checked"] += 1
        return
    if answer.status != 400:
        return
    error = json.loads(answer.body)["error"]
    problems = error.get("problems")
    if problems:  # an invalid workflow: each problem names its step and field
        # ("(document)" for the whole; "" is a key that is the empty string)
        assert all(isinstance(p, dict) and isinstance(p.get("field"), str) for p in problems)
        tally["400 named"] += 1
        return
    named = [name for name in field_names(op) if name in error["message"]]
    assert named, ("a 400 that names no field", where, sorted(field_names(op)))
    tally["400 named"] += 1


def fuzz_rejected(
    send: Callable[[Call], Any],
    known: Known,
    transport: Transport,
    tally: Counter[str],
) -> None:
    """Runs in a worker thread: one request at a time, between two looks at what is stored."""

    recent: list[tuple[str, str, bytes, int]] = []

    async def one(call: Call) -> None:
        before = await stored(transport)
        with trio.move_on_after(REQUEST_HANG_S) as scope:
            answer = await send(call)
        assert not scope.cancelled_caught, ("no answer within", REQUEST_HANG_S, call)
        recent.append((call.method, call.path, call.body[:100], answer.status))
        if 400 <= answer.status < 500:
            after = await stored(transport)
            changed = {k: (before.get(k), after.get(k)) for k in {*before, *after}}
            changed = {k: v for k, v in changed.items() if v[0] != v[1]}
            assert not changed, (
                "a rejected request changed what is stored",
                call,
                changed,
                answer.body[:200],
                recent[-3:],
            )
            check_rejected(call, answer, tally)
            tally["rejected"] += 1
        elif answer.status < 300 and call.method != "GET":
            await settled(transport)

    @settings(
        max_examples=REJECT_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(call=one_call(known))
    def example(call: Call) -> None:
        trio.from_thread.run(one, call)

    example()


async def test_a_rejected_request_names_its_field_and_stores_nothing(
    fresh_nats_server: NatsServer,
) -> None:
    """Every route and method (and the console's files) with bad bodies, parameters, tokens,
    methods and climbing path segments, one request at a time: a 4xx leaves every stream and
    bucket as it was, a 400 names a parameter or field of its route, a method a path does not
    take is 405, and no path segment reaches a file outside the console."""
    tally: Counter[str] = Counter()
    started = trio.current_time()
    async with fuzz_stack(fresh_nats_server) as stack:
        await settled(stack.transport)

        async def send(call: Call) -> Answer:
            return await asgi_request(stack.token_app, call)

        await trio.to_thread.run_sync(fuzz_rejected, send, stack.known, stack.transport, tally)
    print(
        f"rejected: {tally['rejected']} of {REJECT_EXAMPLES} requests in "
        f"{trio.current_time() - started:.1f} s, none changed what NATS stores; "
        f"{tally['400 named']} answers 400 each named a field; {tally['405 checked']} wrong "
        f"methods; statuses {dict(sorted((k, v) for k, v in tally.items() if k.isdigit()))}"
    )
    assert tally["rejected"] >= REJECT_EXAMPLES // 2
    assert tally["400 named"] > 0 and tally["405 checked"] > 0 and tally["401"] > 0


async def test_a_first_listing_with_a_bad_cursor_writes_nothing(
    fresh_nats_server: NatsServer,
) -> None:
    """The first ``GET /runs`` of a service builds the run index once (a write); one with a
    cursor that is no ``next_cursor`` is refused with 400 before that, and nothing is stored.
    (Found by the fuzz of rejected requests: the index marker appeared under one.)"""
    async with fuzz_stack(fresh_nats_server) as stack:
        before = await settled(stack.transport)
        call = Call("GET", "/runs", "/runs", (("cursor", "bogus"),), (), b"", frozenset({400}))
        answer = await asgi_request(stack.open_app, call)
        assert answer.status == 400, answer
        assert "cursor" in json.loads(answer.body)["error"]["message"]
        assert await stored(stack.transport) == before
        ok = await asgi_request(stack.open_app, attrs.evolve(call, query=()))
        assert ok.status == 200, ok
