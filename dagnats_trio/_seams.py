"""The internal crash seam.

The SDK, the journal and the engine call :func:`crash_point` at each boundary where a crash
leaves different durable state. Production installs no hook, and the callers test
``current_hook() is not None`` first (the journal's seams, before calling
``DeliveryState.seam``) or ask :func:`hook_installed`, so a seam in production costs one call
into C.
Tests install a hook for the current Trio run (a ``contextvars`` variable, so concurrent tests and
embedded services never see each other's hooks) that raises to kill the holder or blocks to stall
it past AckWait.
"""

from __future__ import annotations

import contextvars
import enum
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Final

import attrs


class Seam(enum.Enum):
    """The boundaries, in the order a holder reaches them. ``INSIDE_BATCH`` is reached before each
    group of journal records stored together is sent (one message, or an atomic batch).
    ``INSIDE_TOOL`` is reached once the tool function has run (its effect has happened) and
    before its result is recorded; the engine seam lies between saving a dispatch in the run's
    snapshot and publishing its task."""

    BEFORE_CLAIM = "before_claim"
    AFTER_CLAIM = "after_claim"
    #: A group of records is about to go out (a model response with its tool intent first), as
    #: one message or an atomic batch: a crash here, or while it is on the wire, stores none of it.
    INSIDE_BATCH = "inside_batch"
    AFTER_TOOL_INTENT = "after_tool_intent"
    INSIDE_TOOL = "inside_tool"
    AFTER_TOOL_RESULT = "after_tool_result"
    AFTER_COMMIT = "after_commit"
    AFTER_LIFECYCLE_EVENT = "after_lifecycle_event"
    ENGINE_AFTER_DISPATCH_SAVED = "engine_after_dispatch_saved"


@attrs.frozen
class SeamContext:
    """Where the crash point was reached."""

    seam: Seam
    run_id: str
    step_id: str
    iteration: int
    attempt: int
    worker_id: str = ""


SeamHook = Callable[[SeamContext], Awaitable[None]]


_hook: contextvars.ContextVar[SeamHook | None] = contextvars.ContextVar(
    "dagnats_seam_hook", default=None
)

#: The hook installed for this context, or None (always, in production): the journal's seams
#: test ``current_hook() is not None`` before anything else, one call into C and no Python
#: frame, so a seam costs the hot path nothing more. A per-context read, never a cached or
#: process-wide decision: a hook a test installs later is seen by the next seam, and a task
#: started while one was installed keeps it after the ``with`` block that installed it exits.
current_hook: Final = _hook.get


def hook_installed() -> bool:
    """True when a hook is installed for this context (never in production): a caller may skip
    building a :class:`SeamContext` and awaiting :func:`crash_point` when it is False, which
    saves the hot path a context object and a coroutine per seam."""
    return _hook.get() is not None


async def crash_point(ctx: SeamContext) -> None:
    """Call the installed hook, if any. The hook may raise or block; production has none."""
    hook = _hook.get()
    if hook is not None:
        await hook(ctx)


@contextmanager
def install_hook(hook: SeamHook) -> Iterator[None]:
    """Install ``hook`` for code started from this context (tests only)."""
    token = _hook.set(hook)
    try:
        yield
    finally:
        _hook.reset(token)


@attrs.frozen
class ToolStart:
    """A tool function about to start for real (not a reused or honoured result): what a test
    counts to see an unsafe tool start twice, whatever the journal says."""

    run_id: str
    step_id: str
    iteration: int
    attempt: int
    call: int
    name: str
    unsafe: bool
    worker_id: str = ""


ToolStartHook = Callable[[ToolStart], None]

_tool_hook: contextvars.ContextVar[ToolStartHook | None] = contextvars.ContextVar(
    "dagnats_tool_start_hook", default=None
)


def tool_start_observer() -> ToolStartHook | None:
    """The observer installed for this context, if any (production has none)."""
    return _tool_hook.get()


@contextmanager
def observe_tool_starts(hook: ToolStartHook) -> Iterator[None]:
    """Call ``hook`` for every tool start of code started from this context (tests only)."""
    token = _tool_hook.set(hook)
    try:
        yield
    finally:
        _tool_hook.reset(token)
