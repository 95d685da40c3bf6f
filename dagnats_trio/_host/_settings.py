"""What a host is told, checked: the listen address, NATS URLs, client and restart limit as a
user types them (``--listen``, ``DAGNATS_NATS_URL``, ...), and the handlers a ``module:attr``
names. Each bad setting is one :class:`HostSetupError` line, never a traceback of ours.

Light on purpose: no Trio, transport, worker or journal here (the package loads :mod:`._compose`
lazily), so ``dagnats worker --restart-limit 0`` is refused before the host is imported."""

from __future__ import annotations

import importlib
import os
import re
import sys
import traceback
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from .._defaults import (
    DEFAULT_LISTEN_HOST,
    DEFAULT_LISTEN_PORT,
    MAX_RESTART_LIMIT,
    MIN_RESTART_LIMIT,
    Client,
    check_backlog,
    check_restart_limit,
    parse_client,
)

if TYPE_CHECKING:
    from ..worker import Handler


class HostSetupError(ValueError):
    """A setting of the host is unusable (a bad address, a module that does not load)."""


#: Where the importer's own frames come from (left out of a user module's traceback).
_IMPORTLIB_DIR = os.path.dirname(importlib.__file__ or "") + os.sep


@final
class ModuleImportFailed(HostSetupError):
    """The user's module raised while it was imported: one line, and ``module_traceback``
    holds the frames of the module's own code (not the importer's or the CLI's)."""

    def __init__(self, module_name: str, spec: str, exc: BaseException) -> None:
        super().__init__(
            f"importing {module_name!r} for {spec!r} failed: {type(exc).__name__}: {exc}"
        )
        frames = [
            f
            for f in traceback.extract_tb(exc.__traceback__)
            if not f.filename.startswith("<frozen ")
            and f.filename != __file__
            and not f.filename.startswith(_IMPORTLIB_DIR)
        ]
        lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames)]
        lines += traceback.format_exception_only(type(exc), exc)
        self.module_traceback = "".join(lines)


@final
@attrs.frozen
class Listen:
    """An address for the REST API; port 0 picks a free one."""

    host: str = DEFAULT_LISTEN_HOST
    port: int = DEFAULT_LISTEN_PORT

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen(text: str) -> Listen:
    """``HOST:PORT``, ``[V6]:PORT`` or ``:PORT`` (loopback)."""
    # Here, not at the top: the protocol package loads cattrs, which a worker's refusal skips.
    from ..protocol import is_ascii_digits, parse_decimal

    raw = text.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep or not is_ascii_digits(port_text):
        raise HostSetupError(f"listen address {text!r} must look like 127.0.0.1:8080")
    try:
        port = parse_decimal(port_text, low=0, high=65535)
    except ValueError:
        raise HostSetupError(f"listen port {port_text} is not from 0 to 65535") from None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Listen(host or DEFAULT_LISTEN_HOST, port)


def parse_token(text: str | None) -> str | None:
    """``--token`` / ``DAGNATS_API_TOKEN``: None serves without a token. A token given but empty
    or blank is refused rather than taken as none: ``--token "$TOKEN"`` with ``TOKEN`` unset
    would otherwise serve an open API to whoever ``--listen`` lets in. A token that a header
    cannot carry (whitespace or control characters inside) is refused too."""
    if text is None:
        return None
    if not text.strip():
        raise HostSetupError(
            "--token is empty (an unset shell variable?): give a token, or leave --token out to "
            "serve without one"
        )
    if any(c.isspace() or not c.isprintable() for c in text):
        raise HostSetupError("--token must not hold spaces or control characters")
    return text


def parse_nats_urls(text: str) -> tuple[str, ...]:
    """``URL[,URL...]``; a bare ``host:port`` gets the ``nats://`` scheme."""
    urls = []
    for part in text.split(","):
        url = part.strip()
        if not url:
            continue
        if "://" not in url:
            url = f"nats://{url}"
        scheme = url.split("://", 1)[0]
        if scheme not in ("nats", "tls", "ws", "wss"):
            raise HostSetupError(f"NATS URL {part.strip()!r} must start with nats:// or tls://")
        try:  # a bad port or bracket fails here in one line, not inside the client
            parsed = urllib.parse.urlsplit(url)
            parsed.port  # noqa: B018 (parsing it is the check)
        except ValueError as exc:
            raise HostSetupError(f"NATS URL {part.strip()!r} is not valid: {exc}") from None
        if not parsed.hostname:
            raise HostSetupError(f"NATS URL {part.strip()!r} names no host")
        urls.append(url)
    if not urls:
        raise HostSetupError("no NATS URL given (--nats or DAGNATS_NATS_URL)")
    return tuple(urls)


#: What ``--restart-limit`` accepts before its range is checked: ASCII digits (``int()`` would
#: also take ``"1_0"`` and other scripts' digits).
_WHOLE_NUMBER = re.compile(r"[0-9]{1,9}")


def parse_nats_client(text: str) -> Client:
    """``--client`` / ``DAGNATS_CLIENT``: ``native`` or ``nats-py``."""
    try:
        return parse_client(text)
    except ValueError as exc:
        raise HostSetupError(str(exc)) from None


def parse_restart_limit(text: str) -> int:
    """``--restart-limit`` / ``DAGNATS_RESTART_LIMIT``: a whole number from 1 to 1000."""
    raw = text.strip()
    if _WHOLE_NUMBER.fullmatch(raw) is None:
        raise HostSetupError(
            f"restart_limit must be a whole number from {MIN_RESTART_LIMIT} to "
            f"{MAX_RESTART_LIMIT}, got {text!r}"
        )
    return checked_restart_limit(int(raw))


def checked_restart_limit(value: int) -> int:
    """``value`` if it is a usable restart limit, else one :class:`HostSetupError` line."""
    try:
        return check_restart_limit(value)
    except ValueError as exc:
        raise HostSetupError(str(exc)) from None


def checked_backlog(value: int) -> int:
    """``value`` if it is a listen backlog for the API, else one :class:`HostSetupError` line."""
    try:
        check_backlog(value)
    except ValueError as exc:
        raise HostSetupError(f"API {exc}") from None
    return value


def import_spec(spec: str, example: str) -> Any:
    """The object ``module:attr[.attr...]`` names (raises :class:`HostSetupError`, one line).

    The current directory is importable, as it is for ``python -m``, so ``myagent:handlers``
    finds ``./myagent.py`` when the command runs from a console script.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise HostSetupError(f"{spec!r} must be module:attribute, e.g. {example}")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise HostSetupError(f"cannot import {module_name!r} for {spec!r}: {exc}") from None
        raise ModuleImportFailed(module_name, spec, exc) from None
    except Exception as exc:
        raise ModuleImportFailed(module_name, spec, exc) from None
    value: Any = module
    for name in attr.split("."):
        try:
            value = getattr(value, name)
        except AttributeError:
            raise HostSetupError(f"module {module_name!r} has no attribute {attr!r}") from None
    return value


def load_handlers(spec: str) -> Mapping[str, Handler]:
    """``module:attr`` names a ``Mapping[str, Handler]`` (task type -> async handler)."""
    value = import_spec(spec, "myagent:handlers")
    if not isinstance(value, Mapping):
        raise HostSetupError(
            f"{spec} must be a mapping of task type to handler, got {type(value).__name__}"
        )
    out: dict[str, Handler] = {}
    for task_type, handler in value.items():
        if not isinstance(task_type, str) or not callable(handler):
            raise HostSetupError(f"{spec}: {task_type!r} must map a task type to a callable")
        out[task_type] = handler
    if not out:
        raise HostSetupError(f"{spec} has no handlers")
    return out


def merge_handlers(specs: list[Mapping[str, Handler]]) -> dict[str, Handler]:
    """One mapping from several modules; a task type named twice is a mistake, not an override."""
    merged: dict[str, Handler] = {}
    for handlers in specs:
        for task_type, handler in handlers.items():
            if task_type in merged and merged[task_type] is not handler:
                raise HostSetupError(f"task type {task_type!r} has two handlers")
            merged[task_type] = handler
    return merged
