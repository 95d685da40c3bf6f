"""The one client of the REST API the CLI verbs and the demo use (httpx, async, on Trio).

Answers are decoded into the API's own view classes through the protocol converter, so a
response that does not match the documented shape is reported, not half-read. Every failure is a
:class:`ClientError` with the exit code the CLI gives it; no caller needs to know httpx.
"""

from __future__ import annotations

import json
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from typing import Any, TypeVar, final

import attrs
import httpx

from ..api import JournalEntry, JournalPage, RunList, RunStarted, RunView, WorkflowList
from ..dag import WorkflowDef
from ..inputs import Submission
from ..protocol import DecodeError, JsonValue, from_obj
from ._contract import DEFAULT_API_URL
from ._errors import ApiFailure, CannotConnect, ClientError, UsageError

T = TypeVar("T")

#: Bound of one request (an input ``GET ?wait=`` adds its wait to this).
REQUEST_TIMEOUT_S = 15.0
#: Bound of connecting to the API.
CONNECT_TIMEOUT_S = 5.0
#: Records asked for per journal page.
JOURNAL_PAGE_RECORDS = 1_000
#: Reconnects of a journal follower whose stream broke before its ``end`` event.
FOLLOW_RECONNECTS_MAX = 5


@attrs.frozen
class FollowedEntry:
    """A record of a followed journal, or the end of the stream (``entry`` None, with why)."""

    entry: JournalEntry | None
    end_step_status: str | None = None
    end_run_status: str | None = None


def _decode(value: Any, cls: type[T], what: str) -> T:
    try:
        return from_obj(value, cls, what)
    except DecodeError as exc:
        raise ClientError(f"the API answered an unexpected {what}: {exc}") from None


def _failure(response: httpx.Response) -> ApiFailure:
    status = response.status_code
    code, message = "http_error", f"HTTP {status}"
    detail: tuple[str, ...] = ()
    try:
        body = response.json()
        err = body["error"]
        code = str(err.get("code", code))
        message = str(err.get("message", message))
        problems = err.get("problems") or ()
        detail = tuple(
            f"{p.get('step') or 'workflow'}, {p.get('field')}: {p.get('message')}"
            for p in problems
            if isinstance(p, dict)
        )
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return ApiFailure(status, code, message, detail)


@final
class ApiClient:
    """``async with ApiClient(url, token) as api: ...``."""

    def __init__(self, base_url: str = DEFAULT_API_URL, token: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"authorization": f"Bearer {token}"} if token else {}
        try:
            self._http = httpx.AsyncClient(
                base_url=self.base_url,
                headers=headers,
                verify=_tls_verify(self.base_url),
                timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
            )
        except httpx.InvalidURL as exc:  # not an HTTPError: raised before any request
            raise UsageError(f"--api {base_url!r} is not a URL: {exc}") from None

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._http.aclose()

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        params: dict[str, str] | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> httpx.Response:
        headers = {"content-type": "application/json"} if body is not None else None
        try:
            response = await self._http.request(
                method,
                path,
                content=body,
                params=params,
                headers=headers,
                timeout=httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S),
            )
        except httpx.ConnectError:
            raise CannotConnect(
                f"cannot connect to the API at {self.base_url} (is `dagnats dev` or "
                "`dagnats serve` running? set --api or DAGNATS_API_URL)"
            ) from None
        except httpx.TimeoutException:
            raise CannotConnect(f"the API at {self.base_url} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise CannotConnect(f"talking to the API at {self.base_url} failed: {exc}") from None
        if response.status_code >= 400:
            raise _failure(response)
        if response.is_redirect:  # never followed: a redirect is a path of no route
            raise ClientError(
                f"the API answered {method} {path} with a redirect ({response.status_code}) to "
                f"{response.headers.get('location', '?')}, not an answer"
            )
        return response

    async def _json(self, method: str, path: str, **kw: Any) -> Any:
        response = await self._request(method, path, **kw)
        try:
            return response.json()
        except ValueError:
            raise ClientError(f"the API answered {method} {path} with something not JSON") from None

    # --- health and workflows --------------------------------------------------------------

    async def health(self) -> bool:
        await self._request("GET", "/healthz")
        return True

    async def register_workflow(self, definition: bytes) -> JsonValue:
        """The stored definition, as the API echoes it."""
        value: JsonValue = await self._json("POST", "/workflows", body=definition)
        return value

    async def list_workflows(self) -> WorkflowList:
        return _decode(await self._json("GET", "/workflows"), WorkflowList, "workflow list")

    async def get_workflow(self, name: str) -> WorkflowDef:
        raw = await self._json("GET", f"/workflows/{_seg(name, 'NAME')}")
        return _decode(raw, WorkflowDef, "workflow")

    # --- runs ------------------------------------------------------------------------------

    async def list_runs(
        self,
        workflow: str | None = None,
        status: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> RunList:
        query = {
            k: str(v)
            for k, v in (
                ("workflow", workflow),
                ("status", status),
                ("limit", limit),
                ("cursor", cursor),
            )
            if v is not None
        }
        path = "/runs" + ("?" + urllib.parse.urlencode(query) if query else "")
        return _decode(await self._json("GET", path), RunList, "run list")

    async def start_run(
        self, workflow: str, input: JsonValue = None, idempotency_key: str | None = None
    ) -> str:
        body: dict[str, JsonValue] = {"workflow": workflow, "input": input}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        raw = await self._json("POST", "/runs", body=json.dumps(body).encode())
        return _decode(raw, RunStarted, "run start answer").run_id

    async def get_run(self, run_id: str) -> RunView:
        raw = await self._json("GET", f"/runs/{_seg(run_id, 'RUN')}")
        return _decode(raw, RunView, "run")

    async def cancel_run(self, run_id: str, reason: str = "cancelled") -> RunView:
        body = json.dumps({"reason": reason}).encode()
        raw = await self._json("POST", f"/runs/{_seg(run_id, 'RUN')}/cancel", body=body)
        return _decode(raw, RunView, "run")

    async def purge_run(self, run_id: str) -> None:
        """Remove a finished run and every trace of it (409 while it runs, 404 when unknown)."""
        await self._request("DELETE", f"/runs/{_seg(run_id, 'RUN')}")

    # --- inputs ----------------------------------------------------------------------------

    def _inputs_path(self, run_id: str, step_id: str) -> str:
        return f"/runs/{_seg(run_id, 'RUN')}/steps/{_seg(step_id, 'STEP')}/inputs"

    async def submit_input(
        self, run_id: str, step_id: str, request_id: str, mode: str, content: JsonValue
    ) -> tuple[Submission, bool]:
        """The submission, and True when it is new (False: a repeat returned the original)."""
        body = json.dumps({"request_id": request_id, "mode": mode, "content": content}).encode()
        response = await self._request("POST", self._inputs_path(run_id, step_id), body=body)
        sub = _decode(_body_json(response), Submission, "input submission")
        return sub, response.status_code == 201

    async def get_input(
        self, run_id: str, step_id: str, request_id: str, wait_s: float | None = None
    ) -> Submission:
        params = {"wait": f"{round(wait_s * 1000)}ms"} if wait_s else None
        path = f"{self._inputs_path(run_id, step_id)}/{_seg(request_id, 'REQUEST_ID')}"
        raw = await self._json(
            "GET", path, params=params, timeout_s=REQUEST_TIMEOUT_S + (wait_s or 0.0)
        )
        return _decode(raw, Submission, "input submission")

    async def withdraw_input(self, run_id: str, step_id: str, request_id: str) -> None:
        path = f"{self._inputs_path(run_id, step_id)}/{_seg(request_id, 'REQUEST_ID')}"
        await self._request("DELETE", path)

    # --- journal ---------------------------------------------------------------------------

    def _journal_path(self, run_id: str, step_id: str) -> str:
        return f"/runs/{_seg(run_id, 'RUN')}/steps/{_seg(step_id, 'STEP')}/journal"

    async def journal_page(
        self, run_id: str, step_id: str, from_seq: int = 1, limit: int = JOURNAL_PAGE_RECORDS
    ) -> JournalPage:
        params = {"from": str(from_seq), "limit": str(limit)}
        raw = await self._json("GET", self._journal_path(run_id, step_id), params=params)
        return _decode(raw, JournalPage, "journal page")

    async def journal_all(self, run_id: str, step_id: str, from_seq: int = 1) -> list[JournalEntry]:
        """Every record of one step's journal from ``from_seq`` on, page after page."""
        out: list[JournalEntry] = []
        cursor = from_seq
        while True:
            page = await self.journal_page(run_id, step_id, cursor)
            out.extend(page.records)
            if not page.records:
                return out
            cursor = page.next

    async def follow_journal(
        self, run_id: str, step_id: str, from_seq: int = 1
    ) -> AsyncIterator[FollowedEntry]:
        """Records as they are written (server-sent events), then one end marker; resumes with
        ``Last-Event-ID`` when the stream breaks."""
        # The id of the last event received: a record's place (``{seq}`` or ``{seq}.{k}`` for
        # an earlier record of a message holding several), so a resume skips nothing.
        last: str | None = None
        reconnects = 0
        while True:
            headers = {"last-event-id": last} if last is not None else {}
            params = {"follow": "1", "from": str(from_seq)}
            try:
                async with self._http.stream(
                    "GET",
                    self._journal_path(run_id, step_id),
                    params=params,
                    headers=headers,
                    timeout=httpx.Timeout(None, connect=CONNECT_TIMEOUT_S),
                ) as response:
                    if response.status_code >= 400:
                        await response.aread()
                        raise _failure(response)
                    async for event, data, event_id in _sse(response):
                        if event == "end":
                            end = _loads(data)
                            yield FollowedEntry(
                                None,
                                str(end.get("step_status", "unknown")),
                                str(end.get("run_status", "unknown")),
                            )
                            return
                        entry = _decode(_loads(data), JournalEntry, "journal record")
                        last = event_id if event_id is not None else str(entry.seq)
                        yield FollowedEntry(entry)
            except httpx.ConnectError:
                raise CannotConnect(f"cannot connect to the API at {self.base_url}") from None
            except (httpx.ReadError, httpx.RemoteProtocolError) as exc:
                reconnects += 1
                if reconnects > FOLLOW_RECONNECTS_MAX:
                    raise CannotConnect(f"the journal stream kept breaking: {exc}") from None
                continue
            # The stream closed without its end event: reconnect and resume.
            reconnects += 1
            if reconnects > FOLLOW_RECONNECTS_MAX:
                raise ClientError("the journal stream kept closing without its end event")


def _tls_verify(base_url: str) -> ssl.SSLContext | bool:
    """What the client checks TLS with: httpx's own context (``True``: certifi's roots, or those
    of ``SSL_CERT_FILE``/``SSL_CERT_DIR``) only when a request can meet TLS, that is an https API
    or a proxy from the environment that is not plain http. Loading the roots is the costliest
    step of building a client, paid by every verb, for nothing on the usual ``http://`` API.
    Otherwise a context that trusts no root: never used, and a connection that did meet TLS
    would fail its check, not pass unchecked. A URL that does not parse takes httpx's own path
    (its error is the one the user sees)."""
    try:
        urls = (base_url, *urllib.request.getproxies().values())
        if any(urllib.parse.urlsplit(url).scheme.lower() != "http" for url in urls):
            return True
    except ValueError:
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _seg(value: str, what: str) -> str:
    """One path segment holding ``value`` as typed: a request id may hold '/', '?', '#', '%' or
    be '..', so everything but letters, digits and ``_-~`` is percent-encoded (dots too, or an
    id of dots would be taken for a relative path and dropped). An empty one is refused: it
    would make another path (``/runs/`` for ``/runs/{run}``), which the API answers with a
    redirect, not an error."""
    if not value:
        raise UsageError(f"{what} must not be empty")
    return urllib.parse.quote(value, safe="").replace(".", "%2E")


def _body_json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise ClientError("the API answered with something not JSON") from None


def _loads(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise ClientError("the journal stream sent an event that is not JSON") from None


async def _sse(response: httpx.Response) -> AsyncIterator[tuple[str, str, str | None]]:
    """``(event, data, id)`` of each server-sent event (``id`` None when the event has none);
    comments (keep-alives) are skipped."""
    event = "message"
    event_id: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield event, "\n".join(data), event_id
            event, event_id, data = "message", None, []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            event = value
        elif name == "id":
            event_id = value
        elif name == "data":
            data.append(value)
