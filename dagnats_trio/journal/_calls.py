"""What a handler hands the journal: tool calls, model requests, and the checks on them.

Kept apart from the handle so the shapes (``ToolCall``, ``ToolFn``, ``ModelFn``) and the rules on
their values (JSON only, a group member's tuple) can be read, and imported, on their own.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, final

import attrs
import trio

from dagnats_trio.protocol import JsonValue, Replay, check_json

from ._errors import HolderKilled, JournalSettled, ToolOutputNotJson
from ._replay import NOT_JSON_ERROR_PREFIX, ToolResult, canonical_json


@final
@attrs.frozen
class ToolCall:
    """A tool call as the handler states it; the journal fills ``key`` before calling fn."""

    name: str
    input: JsonValue = None
    key: str = ""
    #: The model's id of this call, when it gives one: recorded, and matched on replay.
    call_id: str | None = None

    def with_key(self, key: str) -> ToolCall:
        """This call with ``key`` filled: one construction (``attrs.evolve`` would read the
        class's fields on every tool call); the field check below keeps it whole."""
        return ToolCall(self.name, self.input, key, self.call_id)


if tuple(f.name for f in attrs.fields(ToolCall)) != ("name", "input", "key", "call_id"):
    raise RuntimeError("ToolCall.with_key copies the fields by name; update it with them")


@final
@attrs.frozen
class NextTool:
    """The tool call a model response leads to (``Journal.model(fn, then_tool=...)``): its
    intent is stored with the response, one message, before ``Journal.tool`` runs it."""

    call: ToolCall
    replay: Replay


@final
@attrs.frozen
class Completion:
    """The end of the step a model response leads to, when it is a final answer
    (``Journal.model(fn, then_complete=...)``): the step completes with ``output`` and its
    commit carries ``state`` (the state of record, as ``tc.checkpoint`` would set it). The
    commit is stored with the response, one message, then the lifecycle event is published:
    the iteration has ended, as after ``tc.complete(output)``."""

    output: JsonValue
    state: JsonValue


#: A tool: ``fn(call)`` returning the output, or an awaitable of it (plain functions welcome).
ToolFn = Callable[[ToolCall], Awaitable[JsonValue] | JsonValue]
#: A model request: ``fn()`` returning the response, or an awaitable of it.
ModelFn = Callable[[], Awaitable[JsonValue] | JsonValue]
#: From a model response to the tool call it leads to (None: no tool call follows).
ThenTool = Callable[[JsonValue], NextTool | None]
#: From a model response to the step's completion it leads to (None: not a final answer).
ThenComplete = Callable[[JsonValue], Completion | None]
#: From a tool's result to the state the iteration continues with.
ThenContinue = Callable[[ToolResult], JsonValue]
#: One ``(call, replay, fn)`` of a parallel group.
GroupCall = tuple[ToolCall, Replay, ToolFn]


@final
class CallGuard:
    """One task at a time, in the style of Trio's ``ConflictDetector``: replay matches calls by
    position, so calls from several tasks would be recorded in one order and replayed in another."""

    def __init__(self, msg: str) -> None:
        self._msg = msg
        self._held = False

    def __enter__(self) -> None:
        if self._held:
            raise trio.BusyResourceError(self._msg)
        self._held = True

    def __exit__(self, *exc: object) -> None:
        self._held = False


async def call_maybe_async(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, awaited when it returns an awaitable: ``j.model`` and ``j.tool`` accept
    plain functions as well as coroutine functions (and lambdas wrapping either)."""
    value = fn(*args)
    if inspect.isawaitable(value):
        return await value
    await trio.lowlevel.checkpoint()
    return value


def check_tool_args(call: object, replay: object) -> None:
    """The arguments of a tool call, checked before anything is decided or written."""
    if not isinstance(replay, Replay):
        raise TypeError(f"replay must be Replay.SAFE or Replay.UNSAFE, got {replay!r}")
    if not isinstance(call, ToolCall) or not isinstance(call.name, str) or not call.name:
        raise TypeError(f"call must be a ToolCall with a non-empty name, got {call!r}")


def check_group_call(item: GroupCall) -> GroupCall:
    """One ``(call, replay, fn)`` of a group, checked as ``Journal.tool`` checks its
    arguments."""
    if not isinstance(item, tuple) or len(item) != 3:
        raise TypeError(f"a group member must be a (call, replay, fn) tuple, got {item!r}")
    call, replay, fn = item
    check_tool_args(call, replay)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    return item


def group_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception a group of members stands for: a kill or a settlement first (the
    holder stops as if it had run one call), then any other error, then a cancellation."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for inner in exc.exceptions:
                walk(inner)
        else:
            leaves.append(exc)

    walk(group)
    for kinds in ((HolderKilled,), (JournalSettled,)):
        for leaf in leaves:
            if isinstance(leaf, kinds):
                return leaf
    for leaf in leaves:
        if not isinstance(leaf, trio.Cancelled):
            return leaf
    return leaves[0]


def require_json(what: str, value: JsonValue) -> str:
    """``value``'s canonical JSON; a :class:`TypeError` naming ``what`` when it is not JSON."""
    try:
        return canonical_json(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} is not a JSON value: {exc}") from None


def require_json_value(what: str, value: JsonValue) -> None:
    """:func:`require_json` for a value whose canonical text is not needed (a response, a state,
    an output): the same policy check, without spelling the value out."""
    try:
        check_json(value, where=what)
    except ValueError as exc:
        raise TypeError(f"{what} is not a JSON value: {exc}") from None


def next_of(
    then_tool: ThenTool | None, then_complete: ThenComplete | None, response: JsonValue
) -> NextTool | Completion | None:
    """What a model response leads to: the call ``then_tool`` names, else the completion
    ``then_complete`` gives (its output checked as JSON), else None. ``then_complete`` is not
    asked when ``then_tool`` names a call: a response leads to a tool call or to the step's
    end, never both. A ``then_`` function that returns anything else is a TypeError."""
    if then_tool is not None:
        nxt = then_tool(response)
        if nxt is not None:
            if not isinstance(nxt, NextTool):
                raise TypeError(f"then_tool must return a NextTool or None, got {nxt!r}")
            return nxt
    if then_complete is None:
        return None
    done = then_complete(response)
    if done is None:
        return None
    if not isinstance(done, Completion):
        raise TypeError(f"then_complete must return a Completion or None, got {done!r}")
    require_json_value("step output", done.output)
    return done


def tool_result(output: JsonValue) -> ToolResult:
    """A tool function's output as its result: an error result when it is not JSON."""
    try:
        check_json(output)
    except ValueError as exc:
        return ToolResult(error=f"{NOT_JSON_ERROR_PREFIX}{exc}")
    return ToolResult(output=output)


def not_json(result: ToolResult) -> bool:
    """True when ``result`` records a tool's output that was not JSON."""
    return result.error is not None and result.error.startswith(NOT_JSON_ERROR_PREFIX)


def raise_if_not_json(result: ToolResult) -> ToolResult:
    """``result``, unless it records output that was not JSON: then :class:`ToolOutputNotJson`."""
    if not_json(result):
        raise ToolOutputNotJson(result.error)
    return result
