"""What every command shares: consoles, the one ``trio.run``, and turning failures into exit codes.

A user mistake (bad JSON, an unknown run, a server that is down) ends with one readable line on
stderr and a meaningful exit code, never a stack trace; only a bug in this program shows one.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import attrs
import trio
import typer
from rich.console import RenderableType

from ..dag import DurationError, parse_duration_text
from ..protocol import JsonPolicyError, JsonValue, decode_json, to_json
from ._contract import EXIT_FAILED
from ._errors import ApiFailure, CannotConnect, ClientError, UsageError
from ._say import console, fail

if TYPE_CHECKING:
    from ._client import ApiClient

#: Exit code after Ctrl-C in a command that is not a long-running process.
EXIT_INTERRUPTED = 130


def echo_json(value: Any, cls: Any = None) -> None:
    typer.echo(to_json(value, cls).decode())


def leaf(exc: BaseException) -> BaseException:
    """The one exception inside nested groups of one (Trio nurseries wrap what they raise)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


@attrs.frozen
class _ErrorBody:
    code: str
    message: str
    exit_code: int
    status: int | None = None
    detail: tuple[str, ...] = ()


@attrs.frozen
class _ErrorJson:
    """A failure under ``--json``: ``{"error": {...}}`` on stdout, for the script that asked."""

    error: _ErrorBody


def _client_error_code(err: ClientError) -> str:
    if isinstance(err, CannotConnect):
        return "cannot_connect"
    if isinstance(err, UsageError):
        return "usage"
    return "failed"


def _fail_json(body: _ErrorBody) -> NoReturn:
    echo_json(_ErrorJson(body))
    raise typer.Exit(body.exit_code)


def run_async(fn: Callable[[], Awaitable[int | None]], *, as_json: bool = False) -> NoReturn:
    """The CLI's ``trio.run``: run ``fn`` and exit with its code (None is 0). With ``as_json``
    a failure is printed as JSON on stdout (``{"error": {"code", "message", ...}}``)."""
    try:
        code = trio.run(fn)
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None
    except BaseException as exc:
        inner = leaf(exc)
        if isinstance(inner, ApiFailure):
            if as_json:
                _fail_json(
                    _ErrorBody(
                        inner.code, inner.message, inner.exit_code, inner.status, inner.detail
                    )
                )
            fail(f"{inner.message} ({inner.status} {inner.code})", inner.exit_code, inner.detail)
        if isinstance(inner, ClientError):
            if as_json:
                _fail_json(_ErrorBody(_client_error_code(inner), inner.message, inner.exit_code))
            fail(inner.message, inner.exit_code)
        if isinstance(inner, KeyboardInterrupt):
            raise typer.Exit(EXIT_INTERRUPTED) from None
        if isinstance(inner, typer.Exit):
            raise inner from None
        raise
    raise typer.Exit(code or 0)


def call_api(
    api: str,
    token: str | None,
    fn: Callable[[ApiClient], Awaitable[int | None]],
    *,
    as_json: bool = False,
) -> NoReturn:
    """A verb over the API: ``fn`` with a client of ``api``, under :func:`run_async`."""
    from ._client import ApiClient  # the HTTP stack, for the verbs only

    async def go() -> int | None:
        async with ApiClient(api, token) as client:
            return await fn(client)

    run_async(go, as_json=as_json)


def answer(as_json: bool, value: Any, human: RenderableType | str) -> int:
    """Print ``value`` as JSON for a script, else ``human`` for a person; exit code 0."""
    if as_json:
        echo_json(value)
    else:
        console().print(human)
    return 0


def parse_json_arg(text: str, what: str) -> JsonValue:
    """A JSON value from the command line, or ``@FILE`` for one read from a file."""
    source = text
    if text.startswith("@"):
        source = read_text(Path(text[1:]), what)
    try:
        value: JsonValue = decode_json(source, where=what)
    except JsonPolicyError as exc:
        hint = " (quote it for the shell, e.g. '{\"a\": 1}')" if not text.startswith("@") else ""
        raise UsageError(f"{what} is not valid JSON: {json_problem(exc, what)}{hint}") from None
    return value


def json_problem(exc: JsonPolicyError, root: str) -> str:
    """What is wrong, and where when it is inside the value (``INPUT_JSON.a[1]: NaN is not a
    JSON number``), for a message that already names the whole value ``root``."""
    reason = exc.reason.removeprefix("not valid JSON: ")
    return reason if exc.where == root else f"{exc.where}: {reason}"


def read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{what}: no such file {str(path)!r}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{what}: cannot read {str(path)!r}: {exc}") from None


def parse_wait_s(text: str | None) -> float | None:
    """``--wait 30s`` / ``250ms`` / integer milliseconds, in seconds."""
    if text is None or not text.strip():
        return None
    try:
        ms = parse_duration_text(text)
    except DurationError as exc:
        raise UsageError(f"--wait {text!r}: {exc}") from None
    return ms / 1000.0


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()


__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "answer",
    "call_api",
    "console",
    "echo_json",
    "fail",
    "leaf",
    "parse_json_arg",
    "parse_wait_s",
    "read_text",
    "run_async",
]
