"""The route table of the REST API, and the OpenAPI document and Markdown reference built from it.

Schemas are generated from the attrs classes the handlers decode and encode, so the document
describes what the code does. ``docs/rest.md`` is :func:`render_markdown` of the document; a test
keeps the file, the document and the app's routes in step.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from typing import Any, Union

import attrs

from ..bridge import (
    Appended,
    CheckpointBody,
    CheckpointSaved,
    CheckpointState,
    ClaimedJournal,
    CompleteBody,
    ContinueBody,
    FailBody,
    HeartbeatView,
    JournalAppendBody,
    LeaseView,
    PauseBody,
    PlacedInputs,
    PlaceInputsBody,
    Settled,
)
from ..dag import WorkflowDef
from ..inputs import Submission
from ..web import ErrorEnvelope, InvalidWorkflowEnvelope
from ._rest_check import JournalCheck
from ._rest_journal import JOURNAL_PAGE_LIMIT_DEFAULT, JOURNAL_PAGE_LIMIT_MAX
from ._rest_views import (
    HEALTH_NATS_TIMEOUT_S,
    CancelBody,
    Health,
    JournalEntry,
    JournalPage,
    PreviewChunk,
    RunList,
    RunStarted,
    RunView,
    SignalAccepted,
    SignalBody,
    StartRunBody,
    SubmitInputBody,
    WorkflowList,
)
from .service import LIST_RUNS_LIMIT_DEFAULT, LIST_RUNS_LIMIT_MAX

OPENAPI_VERSION = "3.1.0"
API_TITLE = "dagnats-trio REST API"
API_VERSION = "1"

JSON = "application/json"
SSE = "text/event-stream"


@attrs.frozen
class Param:
    name: str
    location: str  # path, query or header
    description: str
    schema: dict[str, Any] = attrs.field(factory=lambda: {"type": "string"})
    required: bool = False


@attrs.frozen
class Answer:
    status: int
    description: str
    body: Any = None  # an attrs class, or None for no body
    media: str = JSON


@attrs.frozen
class RouteDoc:
    method: str
    path: str
    operation_id: str
    summary: str
    description: str = ""
    params: tuple[Param, ...] = ()
    body: Any = None
    body_required: bool = True
    body_description: str = ""
    answers: tuple[Answer, ...] = ()
    auth: bool = True


def _path(name: str, description: str) -> Param:
    return Param(name, "path", description, required=True)


_RUN = _path("run_id", "The run id.")
_STEP = _path("step_id", "The step id.")
_REQUEST = _path(
    "request_id",
    "The client's id of the input: 1-128 printable characters, percent-encoded "
    "(`/` as `%2F`, an id of dots as `%2E`).",
)
_INT = {"type": "integer", "minimum": 0}

_BAD = Answer(400, "Bad JSON, a missing or wrong field, or a bad query parameter.", ErrorEnvelope)
_NO_RUN = Answer(404, "Unknown run.", ErrorEnvelope)
_NO_STEP = Answer(404, "Unknown run or step.", ErrorEnvelope)
_TOO_LARGE = Answer(413, "The body is larger than the configured limit.", ErrorEnvelope)


ROUTES: tuple[RouteDoc, ...] = (
    RouteDoc(
        "GET",
        "/healthz",
        "health",
        "Health of the API process and of its NATS connection.",
        description=(
            "Answers 200 with `nats` = `up` when NATS JetStream answers a round trip within "
            f"{HEALTH_NATS_TIMEOUT_S:g} s, and 503 with `status` = `unavailable` and `nats` = "
            "`down` when it does not (the process serves, but every NATS-backed route would "
            "answer 503)."
        ),
        answers=(
            Answer(200, "The process serves requests and NATS answers.", Health),
            Answer(503, "NATS does not answer.", Health),
        ),
        auth=False,
    ),
    RouteDoc(
        "GET",
        "/openapi.json",
        "openapi",
        "This document.",
        answers=(Answer(200, "The OpenAPI document.", None),),
    ),
    RouteDoc(
        "POST",
        "/workflows",
        "register_workflow",
        "Register (or replace) a workflow definition.",
        body=WorkflowDef,
        body_description=(
            'A workflow definition. Durations may be strings such as "30s" or integer '
            "milliseconds; they come back as milliseconds."
        ),
        answers=(
            Answer(201, "Registered; the stored definition.", WorkflowDef),
            Answer(
                400,
                "Bad JSON, or an invalid definition: `error.problems` lists every problem with "
                "its step and field.",
                InvalidWorkflowEnvelope,
            ),
            _TOO_LARGE,
        ),
    ),
    RouteDoc(
        "GET",
        "/workflows",
        "list_workflows",
        "Every registered workflow.",
        answers=(Answer(200, "The definitions.", WorkflowList),),
    ),
    RouteDoc(
        "GET",
        "/workflows/{name}",
        "get_workflow",
        "One workflow definition.",
        params=(_path("name", "The workflow name."),),
        answers=(
            Answer(200, "The definition.", WorkflowDef),
            Answer(404, "Unknown workflow.", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "POST",
        "/runs",
        "start_run",
        "Start a run of a registered workflow.",
        description="A repeat with the same `idempotency_key` returns the run the key started.",
        body=StartRunBody,
        answers=(
            Answer(201, "Started; the run id.", RunStarted),
            _BAD,
            Answer(404, "Unknown workflow.", ErrorEnvelope),
            _TOO_LARGE,
        ),
    ),
    RouteDoc(
        "GET",
        "/runs",
        "list_runs",
        "Runs in run-id order, filtered and paged.",
        params=(
            Param("workflow", "query", "Only runs of this workflow."),
            Param(
                "status",
                "query",
                "Only runs in this status.",
                {"type": "string", "enum": ["running", "completed", "failed", "cancelled"]},
            ),
            Param(
                "limit",
                "query",
                f"Runs per page (1-{LIST_RUNS_LIMIT_MAX}, default {LIST_RUNS_LIMIT_DEFAULT}).",
                {"type": "integer", "minimum": 1, "maximum": LIST_RUNS_LIMIT_MAX},
            ),
            Param("cursor", "query", "`next_cursor` of the previous page."),
        ),
        answers=(Answer(200, "One page of runs.", RunList), _BAD),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}",
        "get_run",
        "A run with its steps (iteration, attempt, status, output, error of each).",
        params=(_RUN,),
        answers=(Answer(200, "The run.", RunView), _NO_RUN),
    ),
    RouteDoc(
        "POST",
        "/runs/{run_id}/cancel",
        "cancel_run",
        "Ask the engine to cancel a run (asynchronous).",
        params=(_RUN,),
        body=CancelBody,
        body_required=False,
        answers=(
            Answer(202, "Cancellation requested; the run as it was.", RunView),
            _BAD,
            _NO_RUN,
            Answer(409, "The run has already finished.", ErrorEnvelope),
            _TOO_LARGE,
        ),
    ),
    RouteDoc(
        "DELETE",
        "/runs/{run_id}",
        "purge_run",
        "Purge a finished run: remove every trace of it, its child runs included.",
        description=(
            "Removes the run's history, leftover task messages and timers, the journal of every "
            "step, checkpoints, signals, inputs, the idempotency key (which can then start a new "
            "run) and the snapshot, and does the same for the child runs of its sub-workflow "
            "steps. Only a completed, failed or cancelled run can be purged. An interrupted "
            "purge can be repeated; once a purge has answered 204 the run is 404."
        ),
        params=(_RUN,),
        answers=(
            Answer(204, "Purged."),
            Answer(
                400, "The run has more nested child runs than one purge removes.", ErrorEnvelope
            ),
            Answer(404, "Unknown run (or already purged).", ErrorEnvelope),
            Answer(
                409,
                "`run_running`: the run, or one of its child runs, has not finished.",
                ErrorEnvelope,
            ),
        ),
    ),
    RouteDoc(
        "POST",
        "/runs/{run_id}/signal/{name}",
        "send_signal",
        "Send a named signal with a JSON payload to a run.",
        params=(_RUN, _path("name", "The signal name.")),
        body=SignalBody,
        body_required=False,
        answers=(Answer(202, "Signal stored.", SignalAccepted), _BAD, _NO_RUN, _TOO_LARGE),
    ),
    RouteDoc(
        "POST",
        "/runs/{run_id}/steps/{step_id}/inputs",
        "submit_input",
        "Submit an input (steer or follow_up) to a running step.",
        description=(
            "A repeat of the same `request_id` returns the original submission, whatever its "
            "content, so a client may retry safely: while the submission is queued or placed "
            "(however long the step waits) and for seven days after it finished."
        ),
        params=(_RUN, _STEP),
        body=SubmitInputBody,
        answers=(
            Answer(201, "A new submission, queued.", Submission),
            Answer(200, "A repeat: the original submission.", Submission),
            _BAD,
            _NO_STEP,
            Answer(409, "The step or run has finished.", ErrorEnvelope),
            Answer(413, "The body or the content is too large.", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/inputs/{request_id}",
        "get_input",
        "An input's status; with `wait`, after it changes (long poll).",
        description=(
            "`queued` and `placed` are passing states; every submission ends `done` (the "
            "iteration that placed it committed), `unanswered` (the step finished first: before "
            "it was placed, or after an iteration that placed it failed, was cancelled or timed "
            "out; `placed_iteration` then says which) or `withdrawn`, so a client long-polling "
            "with `wait` always sees a final state."
        ),
        params=(
            _RUN,
            _STEP,
            _REQUEST,
            Param(
                "wait",
                "query",
                'Wait up to this long for a change: "30s", "500ms" or integer milliseconds '
                "(bounded by the server's maximum).",
            ),
            Param(
                "since",
                "query",
                "With `wait`: wait for a status other than this one (default: the current).",
                {
                    "type": "string",
                    "enum": ["queued", "placed", "done", "withdrawn", "unanswered"],
                },
            ),
        ),
        answers=(
            Answer(200, "The submission.", Submission),
            _BAD,
            Answer(404, "Unknown input.", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "DELETE",
        "/runs/{run_id}/steps/{step_id}/inputs/{request_id}",
        "withdraw_input",
        "Withdraw a queued input; once answered 204, it is never placed.",
        params=(_RUN, _STEP, _REQUEST),
        answers=(
            Answer(204, "Withdrawn (also for a repeated withdrawal)."),
            _BAD,
            Answer(404, "Unknown input.", ErrorEnvelope),
            Answer(409, "Already placed (or settled otherwise).", ErrorEnvelope),
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/journal",
        "read_journal",
        "A step's journal records: a page, or a server-sent event stream with `follow=1`.",
        description=(
            "A page holds records with sequence >= `from`; pass `next` back as `from` for the "
            "next page. With `follow=1` the answer is `text/event-stream`: each event has "
            "`id` = the record's sequence, `event` = the record type, `data` = the record entry "
            "as JSON. The stream delivers new records as they are written and ends with an "
            "`end` event once the step (or its run) has finished and every record was sent. A "
            "client that reconnects with `Last-Event-ID` resumes right after that record, with "
            "no gap and no repeat. The record kinds and their fields are in "
            "docs/journal-wire-format.md."
        ),
        params=(
            _RUN,
            _STEP,
            Param("from", "query", "First sequence to return (default 1).", _INT),
            Param(
                "limit",
                "query",
                f"Records per page (1-{JOURNAL_PAGE_LIMIT_MAX}, default "
                f"{JOURNAL_PAGE_LIMIT_DEFAULT}); ignored with `follow`.",
                {"type": "integer", "minimum": 1, "maximum": JOURNAL_PAGE_LIMIT_MAX},
            ),
            Param(
                "follow",
                "query",
                "`1` or `true` for a server-sent event stream.",
                {"type": "string", "enum": ["0", "1", "true", "false"]},
            ),
            Param(
                "Last-Event-ID",
                "header",
                "With `follow`: resume after this sequence (wins over `from`).",
                _INT,
            ),
        ),
        answers=(
            Answer(200, "A page of records (JSON), or the event stream.", JournalPage),
            Answer(
                200,
                "With `follow=1`: events whose data is a journal entry.",
                JournalEntry,
                media=SSE,
            ),
            _BAD,
            _NO_STEP,
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/preview",
        "follow_preview",
        "A step's live preview (what its handler sends with `put_stream`), as a server-sent "
        "event stream.",
        description=(
            "The answer is `text/event-stream`. Each chunk the handler puts after the client has "
            "the response headers is one `preview` event, in the order it was put, whose `data` "
            "is a preview chunk as JSON: `text` when the chunk is UTF-8, else `base64` of its "
            "bytes. The stream ends with an `end` event once the step (or its run) has "
            "finished. A preview is live, not a record: nothing is stored, events carry no "
            "`id`, and a reconnect gets what is put from then on (the journal holds the "
            "record). Comment lines keep a quiet stream alive."
        ),
        params=(_RUN, _STEP),
        answers=(
            Answer(200, "Events whose data is a preview chunk.", PreviewChunk, media=SSE),
            _BAD,
            _NO_STEP,
        ),
    ),
    RouteDoc(
        "GET",
        "/runs/{run_id}/steps/{step_id}/journal/check",
        "check_journal",
        "The audit of a step's journal (the rules of `dagnats journal check`).",
        description=(
            "Reads the step's whole journal and runs the audit of "
            "`dagnats_trio.journal.check` on it: `ok` with the counts, or the violations, each "
            "with its `rule`, the record's `seq` and a message. Until the step has finished, the "
            "engine's iteration count is not compared (`compared_iterations` false). A record "
            "that does not decode is a violation of rule `undecodable`."
        ),
        params=(_RUN, _STEP),
        answers=(
            Answer(200, "The verdict.", JournalCheck),
            _BAD,
            _NO_STEP,
        ),
    ),
)


# --- the worker bridge (docs/bridge.md) ------------------------------------------------------

_TOKEN = _path("token", "The lease token from `poll`.")
_NO_LEASE = Answer(
    404,
    "Unknown lease (`lease_not_found`), or this server runs no bridge (`bridge_disabled`).",
    ErrorEnvelope,
)
_FENCED_OR_BUSY = Answer(
    409,
    "`fenced`: a successor claimed the task's journal; `cancelled`: the run was cancelled; "
    "`lease_busy`: another request of this lease is running.",
    ErrorEnvelope,
)
_GONE = Answer(
    410,
    "The task is finished for this lease: `stale`, `committed`, `restart_limit`, `settled` or "
    "`lease_expired`.",
    ErrorEnvelope,
)
_LEASE_ANSWERS = (_BAD, _NO_LEASE, _FENCED_OR_BUSY, _GONE, _TOO_LARGE)
_CLAIMS = (
    "The first `journal/read`, `journal/append` or `inputs/place` of a lease claims the task's "
    "journal, as the Python SDK's `tc.journal()` does."
)
_SETTLES = (
    "Once the lease has claimed the journal this commits first and then publishes the lifecycle "
    "event; without a claim it publishes the event with the dispatch identity. Then the task is "
    "acknowledged. A cancelled run answers 409 `cancelled`."
)


def _lease_route(
    suffix: str,
    operation_id: str,
    summary: str,
    ok: Answer,
    *,
    description: str = "",
    body: Any = None,
    body_required: bool = True,
    extra: tuple[Answer, ...] = (),
) -> RouteDoc:
    return RouteDoc(
        "POST",
        f"/bridge/leases/{{token}}/{suffix}",
        operation_id,
        summary,
        description=description,
        params=(_TOKEN,),
        body=body,
        body_required=body_required,
        answers=(ok, *_LEASE_ANSWERS, *extra),
    )


BRIDGE_ROUTES: tuple[RouteDoc, ...] = (
    RouteDoc(
        "POST",
        "/bridge/tasks/{task_type}/poll",
        "bridge_poll",
        "Lease the next task of a task type (long poll).",
        description=(
            "The lease holds one delivery of the durable consumer `workers-{task_type}`, shared "
            "with Python workers of that type. Send any lease request at least every "
            "`ack_wait_ms` (heartbeat while working); a lease left quiet longer expires and the "
            "task is redelivered. See docs/bridge.md."
        ),
        params=(
            _path("task_type", "The task type."),
            Param(
                "wait",
                "query",
                'Wait up to this long for a task: "10s", "500ms" or integer milliseconds '
                "(default 0; bounded by the bridge's maximum).",
            ),
        ),
        answers=(
            Answer(200, "A leased task.", LeaseView),
            Answer(204, "No task came within `wait`."),
            _BAD,
            Answer(404, "This server runs no bridge (`bridge_disabled`).", ErrorEnvelope),
            Answer(
                503,
                "`too_many_leases`: the bridge holds its maximum of leases; `not_provisioned`.",
                ErrorEnvelope,
            ),
        ),
    ),
    _lease_route(
        "heartbeat",
        "bridge_heartbeat",
        "Keep the lease alive and check the run and the claim.",
        Answer(200, "The lease is alive.", HeartbeatView),
    ),
    _lease_route(
        "journal/read",
        "bridge_journal_read",
        "The claim and the records of the current iteration.",
        Answer(200, "The claim and the records.", ClaimedJournal),
        description=_CLAIMS
        + " A stale task answers 410 `stale`; one this dispatch already committed republishes "
        "its event and answers 410 `committed`; a claim over the restart limit commits the "
        "failure and answers 410 `restart_limit`.",
        extra=(Answer(503, "`not_provisioned`: the journal stream is missing.", ErrorEnvelope),),
    ),
    _lease_route(
        "journal/append",
        "bridge_journal_append",
        "Append a model or tool record (fenced on the lease's last sequence).",
        Answer(200, "Stored.", Appended),
        description=_CLAIMS + " The record kinds are in docs/journal-wire-format.md.",
        body=JournalAppendBody,
    ),
    _lease_route(
        "inputs/place",
        "bridge_place_inputs",
        "Place the queued inputs of a mode (`tc.place_inputs`).",
        Answer(200, "The inputs placed in this iteration, each once per lease.", PlacedInputs),
        description=_CLAIMS,
        body=PlaceInputsBody,
    ),
    _lease_route(
        "load_checkpoint",
        "bridge_load_checkpoint",
        "The task's state and where it came from.",
        Answer(200, "The state.", CheckpointState),
    ),
    _lease_route(
        "checkpoint",
        "bridge_checkpoint",
        "Save the state for the next iteration.",
        Answer(200, "Saved.", CheckpointSaved),
        description=(
            "With a claim the state rides the next commit (no cap); otherwise it is written to "
            "KV, capped by the step's `loop_state_max_bytes` (413 `checkpoint_too_large`)."
        ),
        body=CheckpointBody,
    ),
    _lease_route(
        "complete",
        "bridge_complete",
        "The step is done with an output.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES,
        body=CompleteBody,
        body_required=False,
    ),
    _lease_route(
        "fail",
        "bridge_fail",
        "This attempt failed.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES,
        body=FailBody,
    ),
    _lease_route(
        "continue",
        "bridge_continue",
        "End this iteration of an agent loop, optionally with a durable wait.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES
        + " With `until_input` while inputs are queued it answers 409 `inputs_queued` and "
        "settles nothing.",
        body=ContinueBody,
        body_required=False,
    ),
    _lease_route(
        "pause",
        "bridge_pause",
        "Park the step; it comes back to the same iteration and attempt.",
        Answer(200, "Settled.", Settled),
        description=_SETTLES,
        body=PauseBody,
    ),
)

ROUTES = ROUTES + BRIDGE_ROUTES


# --- schemas from attrs classes --------------------------------------------------------------


class _Schemas:
    def __init__(self) -> None:
        self.components: dict[str, dict[str, Any]] = {}

    def ref(self, cls: Any) -> dict[str, Any]:
        name = cls.__name__
        if name not in self.components:
            self.components[name] = {}  # placeholder: breaks recursion
            self.components[name] = self._object(cls)
        return {"$ref": f"#/components/schemas/{name}"}

    def _object(self, cls: Any) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        props: dict[str, Any] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            props[field.name] = self.of(hints[field.name])
            if field.default is attrs.NOTHING:
                required.append(field.name)
        schema: dict[str, Any] = {"type": "object", "properties": props}
        if required:
            schema["required"] = required
        doc = (cls.__doc__ or "").strip()
        if doc and not doc.startswith(f"{cls.__name__}("):
            schema["description"] = " ".join(doc.split()).replace("``", "`")
        return schema

    def of(self, tp: Any) -> dict[str, Any]:
        if tp is Any:
            return {"description": "any JSON value"}
        if tp is type(None):
            return {"type": "null"}
        origin = typing.get_origin(tp)
        if origin is Union or isinstance(tp, types.UnionType):
            return {"anyOf": [self.of(a) for a in typing.get_args(tp)]}
        if tp is str:
            return {"type": "string"}
        if tp is bool:
            return {"type": "boolean"}
        if tp is int:
            return {"type": "integer"}
        if tp is float:
            return {"type": "number"}
        if isinstance(tp, type) and issubclass(tp, enum.Enum):
            return {"type": "string", "enum": [m.value for m in tp]}
        if origin in (list, tuple):
            args = [a for a in typing.get_args(tp) if a is not Ellipsis]
            return {"type": "array", "items": self.of(args[0]) if args else {}}
        if origin is dict:
            _, value = typing.get_args(tp)
            return {"type": "object", "additionalProperties": self.of(value)}
        if attrs.has(tp):
            return self.ref(tp)
        return {}


def openapi_document() -> dict[str, Any]:
    schemas = _Schemas()
    schemas.ref(ErrorEnvelope)
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.operation_id,
            "summary": route.summary,
        }
        if route.description:
            op["description"] = route.description
        if route.params:
            op["parameters"] = [
                {
                    "name": p.name,
                    "in": p.location,
                    "required": p.required,
                    "description": p.description,
                    "schema": p.schema,
                }
                for p in route.params
            ]
        if route.body is not None:
            op["requestBody"] = {
                "required": route.body_required,
                "description": route.body_description or f"A {route.body.__name__}.",
                "content": {JSON: {"schema": schemas.ref(route.body)}},
            }
        responses: dict[str, Any] = {}
        for answer in (*route.answers, *_common_answers(route)):
            key = str(answer.status)
            slot = responses.setdefault(key, {"description": answer.description})
            if slot["description"] != answer.description:
                slot["description"] += " " + answer.description
            if answer.body is not None:  # a route's own body wins over the common one
                slot.setdefault("content", {}).setdefault(
                    answer.media, {"schema": schemas.ref(answer.body)}
                )
        op["responses"] = dict(sorted(responses.items()))
        if not route.auth:
            op["security"] = []
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": API_TITLE,
            "version": API_VERSION,
            "description": (
                'Every error is JSON: {"error": {"code", "message"}}. Bodies are UTF-8 JSON with '
                "finite numbers, 64-bit integers and no lone surrogates (else 400 invalid_json, "
                "naming where). When the server has a token, every route but /healthz needs "
                "`Authorization: Bearer <token>`."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.components.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


#: Answers every route can give, listed per route in the document and once in the Markdown.
COMMON_ANSWERS: tuple[Answer, ...] = (
    Answer(401, "A token is configured and the request lacks it.", ErrorEnvelope),
    Answer(405, "Method not allowed on this path.", ErrorEnvelope),
    Answer(500, "Internal error (no details are given; see the server log).", ErrorEnvelope),
    Answer(503, "NATS is unavailable or not provisioned.", ErrorEnvelope),
)


#: Path parameters that are ids (a lease ``token`` is not: the bridge made it).
ID_PARAMS = frozenset({"name", "run_id", "step_id", "request_id", "task_type"})


def _common_answers(route: RouteDoc) -> tuple[Answer, ...]:
    common = tuple(a for a in COMMON_ANSWERS if route.auth or a.status != 401)
    ids = [
        f"`invalid_{p.name}`" for p in route.params if p.location == "path" and p.name in ID_PARAMS
    ]
    if not ids:
        return common
    bad_id = Answer(400, f"{' or '.join(ids)}: a path parameter is not a valid id.", ErrorEnvelope)
    return (bad_id, *common)


# --- the Markdown reference ------------------------------------------------------------------

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
- **Integer parameters** (`limit`, `from`, `Last-Event-ID`, a `wait` in milliseconds) are ASCII
  digits only (no sign, space or other script's digits such as `²`), within the bounds given
  below; anything else is `400` naming the parameter (`invalid_query`, `invalid_wait`,
  `invalid_last_event_id`).
- **Authorization**: when a token is configured (`DAGNATS_API_TOKEN`), every route but
  `/healthz` needs `Authorization: Bearer <token>`; without it the answer is `401`. The inputs
  and journal routes need it like every other: an input writes into a running agent's context.
- **Bounds**: request bodies larger than the server's limit are refused with `413` while they
  are read; an input `wait` is cut to the server's maximum.
- **Every route** may also answer `401` (token missing or wrong; not `/healthz`), `405` (wrong
  method), `500` (internal) and `503` (NATS unavailable or not provisioned).
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
    out = [DOCS_HEADER]
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


def openapi_json() -> bytes:
    return json.dumps(openapi_document(), indent=2, ensure_ascii=False).encode() + b"\n"


if __name__ == "__main__":  # pragma: no cover - the doc generator
    import pathlib
    import sys

    target = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "docs/rest.md")
    target.write_text(render_markdown(openapi_document()), encoding="utf-8")
    print(f"wrote {target}")
