"""``docs/rest.md``: the Markdown reference rendered from the OpenAPI document (a test keeps the
file, the document and the app's routes in step)."""

from __future__ import annotations

from typing import Any

from ..web import BODY_READ_TIMEOUT_S
from ._rest_routedoc import COMMON_ANSWERS, JSON

DOCS_HEADER = """\
# REST API reference

<!-- Generated from the OpenAPI document: `uv run python -m dagnats_trio.api._rest_openapi`
     rewrites this file; tests/api/test_docs.py fails when it is out of date. -->

The API serves JSON over HTTP (`dagnats dev` listens on `127.0.0.1:8080`). The machine-readable
form of this page is `GET /openapi.json`.

- **Errors** are `application/json`, exactly `{"error": {"code": "...", "message": "..."}}` with
  the status below (both strings, the message never empty); an invalid workflow adds
  `error.problems`, a list of `{step, field, message}`. No stack trace is ever sent: an unexpected
  failure is `500` with code `internal`, and the details go to the server log.
- **JSON** follows one policy everywhere (REST and bridge bodies, the NATS `api.inputs.*`
  requests, run inputs, inputs, signal payloads, checkpoints, step outputs): UTF-8 only; finite
  numbers only (no `NaN`, `Infinity`, `-Infinity`, nor `1e400`, which overflows a double);
  integers within the signed 64-bit range; no lone surrogate (`"\\ud800"`, or its raw bytes
  `ED A0 80`) in a string or key; at most 64 levels of nesting. A body that breaks it is `400`
  `invalid_json` whose message starts with where, e.g. `body.input.x[1]: Infinity is not a JSON
  number (finite numbers only)`. So whatever is stored is served back as valid JSON.
- **Integer parameters** (`limit`, `from`, `Last-Event-ID` and its `.k` part, a `wait` in
  milliseconds) are ASCII digits only (no sign, space or other script's digits such as `²`),
  within the bounds given below; anything else is `400` naming the parameter (`invalid_query`,
  `invalid_wait`, `invalid_last_event_id`).
- **Authorization**: when a token is configured (`DAGNATS_API_TOKEN`), every route but
  `/healthz` needs `Authorization: Bearer <token>`; without it the answer is `401`. The inputs
  and journal routes need it like every other: an input writes into a running agent's context.
- **Bounds**: request bodies larger than the server's limit are refused with `413` while they
  are read, and one that has not arrived {BODY_S} s after its headers with `408` `body_timeout`;
  an input `wait` is cut to the server's maximum.
- **Every route** may also answer `401` (token missing or wrong; not `/healthz`), `405` (wrong
  method), `500` (internal) and `503` (NATS unavailable or not provisioned); every `POST` and
  `DELETE` also `403` `cross_origin`; with no token on a loopback bind, every route but `/healthz`
  also `403` `host_not_allowed`.
- **Web pages of other origins** cannot act through the API, with or without a token: a `POST`
  or `DELETE` that a browser sent from another site (`Sec-Fetch-Site` other than `same-origin`
  or `none`; from a browser without it, an `Origin` whose host is not the request's `Host`) is
  `403 cross_origin`. Otherwise any page open in a browser on the API's machine could start runs
  or send inputs into an agent through the loopback address, a `text/plain` body being read as
  JSON. Clients that are not browsers send neither header; the console at `/ui/` is same-origin.
- **Host names** (DNS rebinding): an API that listens on a loopback address with no token serves
  only requests whose `Host` is `localhost`, an address of `127.0.0.0/8` or `[::1]` (any port);
  any other is `403 host_not_allowed`, but `/healthz`. Otherwise a page whose name was rebound to
  `127.0.0.1` would be same-origin with the API and could read and act on it. With a token, or
  on a bind other than loopback, this rule is off.
- **Paths** are matched as written: one this reference does not name, a trailing `/` included
  (`/runs/`), is `404 not_found`. No API route redirects.
- **Ids** (a workflow `name` and `workflow`, `run_id`, `step_id`, a step's `id` and `task`, a
  signal `name`, a bridge `task_type`) are 1-128 characters of letters, digits, `_` and `-`,
  matched in full (so a trailing newline is refused: these ids become NATS subjects and keys).
  Any other is `400` with code `invalid_<field>` and a message naming the field; inside a
  workflow definition it is `invalid_workflow` with the field in `error.problems`.
- **Request ids** (`request_id` of an input) may be any 1-128 printable characters: dots,
  colons, spaces, `*`, `>`, `/` and any script. Control characters, line and paragraph
  separators and lone surrogates are `400 invalid_request_id`. In a path, percent-encode the id
  (`/` as `%2F`, and an id of dots as `%2E`s, or it reads as `.` or `..`).
- **Durations** in queries and bodies are strings such as `"30s"`, `"250ms"`, `"1h30m"`, or
  integer milliseconds.
"""


def render_markdown(doc: dict[str, Any]) -> str:
    out = [DOCS_HEADER.replace("{BODY_S}", f"{BODY_READ_TIMEOUT_S:g}")]
    common = {(a.status, a.description) for a in COMMON_ANSWERS}
    schemas: dict[str, Any] = doc["components"]["schemas"]
    for path, methods in doc["paths"].items():
        for method, op in methods.items():
            out.append(f"\n## `{method.upper()} {path}`\n\n{op['summary']}\n")
            if op.get("description"):
                out.append(f"\n{op['description']}\n")
            if op.get("security") == []:
                out.append("\nNo token needed.\n")
            params = op.get("parameters", [])
            if params:
                out.append("\n| parameter | in | required | description |\n|---|---|---|---|\n")
                for p in params:
                    req = "yes" if p["required"] else "no"
                    out.append(f"| `{p['name']}` | {p['in']} | {req} | {p['description']} |\n")
            body = op.get("requestBody")
            if body is not None:
                name = _ref_name(body["content"][JSON]["schema"])
                req = "" if body["required"] else " (optional)"
                out.append(f"\nBody{req}: [`{name}`](#{name.lower()}). {body['description']}\n")
            out.append("\n| status | meaning | body |\n|---|---|---|\n")
            for status, answer in op["responses"].items():
                if (int(status), answer["description"]) in common:
                    continue
                bodies = ", ".join(
                    f"`{media}` [`{_ref_name(c['schema'])}`](#{_ref_name(c['schema']).lower()})"
                    for media, c in answer.get("content", {}).items()
                )
                out.append(f"| {status} | {answer['description']} | {bodies or '-'} |\n")
    out.append("\n# Schemas\n")
    for name, schema in schemas.items():
        out.append(f"\n## {name}\n\n")
        if schema.get("description"):
            out.append(f"{schema['description']}\n\n")
        required = set(schema.get("required", []))
        out.append("| field | type | required |\n|---|---|---|\n")
        for field, fschema in schema.get("properties", {}).items():
            req = "yes" if field in required else "no"
            out.append(f"| `{field}` | {_type_text(fschema)} | {req} |\n")
    return "".join(out)


def _ref_name(schema: dict[str, Any]) -> str:
    return str(schema["$ref"]).rsplit("/", 1)[-1]


def _type_text(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = _ref_name(schema)
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_type_text(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f'`"{v}"`' for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type_text(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map of {_type_text(schema['additionalProperties'])}"
    if kind is None:
        return "any JSON"
    return str(kind)
