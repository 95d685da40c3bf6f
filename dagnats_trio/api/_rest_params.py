"""The REST API's query parameters: each read and checked, a bad one a 400 naming it."""

from __future__ import annotations

from collections import Counter

from starlette.requests import Request

from ..dag import DurationError, parse_duration_text
from ..inputs import SubmissionStatus
from ..protocol import parse_decimal
from ..web import bad_request, listed_names


def _only_params(request: Request, allowed: set[str]) -> None:
    """400 for a parameter the route does not take, or one given twice: ``?limit=1&limit=2``
    or ``?workflow=a&workflow=b`` was answered by the last value alone, so a client that meant
    both (or either) got neither said (found from outside)."""
    keys = [k for k, _ in request.query_params.multi_items()]
    unknown = sorted({k for k in keys if k not in allowed})
    if unknown:
        names = ", ".join(sorted(allowed))
        raise bad_request(
            f"unknown query parameter(s) {listed_names(unknown)}; allowed: {names}",
            code="invalid_query",
        )
    repeated = sorted(k for k, n in Counter(keys).items() if n > 1)
    if repeated:
        raise bad_request(
            f"query parameter(s) {', '.join(repeated)} given more than once", code="invalid_query"
        )


def _int_param(raw: str | None, name: str, low: int, high: int, default: int) -> int:
    """An integer parameter, ``default`` when absent. Given empty (``?limit=``) it is a 400
    like any other non-number: it was read as the default (found from outside), so a client
    whose value went missing was answered as if it had asked for nothing."""
    if raw is None:
        return default
    if raw == "":
        raise bad_request(f"{name} is empty; give digits or leave it out", code="invalid_query")
    try:
        return parse_decimal(raw, low=low, high=high)
    except ValueError as exc:
        raise bad_request(f"{name} {exc}", code="invalid_query") from None


def _bool_param(raw: str | None, name: str) -> bool:
    if raw is None or raw in ("", "0", "false"):
        return False
    if raw in ("1", "true"):
        return True
    raise bad_request(f"{name} must be 1, 0, true or false", code="invalid_query")


def _wait_param(raw: str | None, max_wait_s: float) -> float | None:
    """``wait`` as seconds, cut to ``max_wait_s``: "30s", "250ms" or integer milliseconds."""
    if raw is None or raw == "":
        return None
    try:
        ms = parse_duration_text(raw)
    except DurationError as exc:
        raise bad_request(f"wait: {exc}", code="invalid_wait") from None
    return min(ms / 1000.0, max_wait_s)


def _since_param(raw: str | None) -> SubmissionStatus | None:
    if raw is None or raw == "":
        return None
    try:
        return SubmissionStatus(raw)
    except ValueError:
        names = ", ".join(s.value for s in SubmissionStatus)
        raise bad_request(f"since must be one of {names}", code="invalid_query") from None
