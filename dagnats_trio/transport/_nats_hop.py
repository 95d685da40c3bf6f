"""The one hop from Trio into nats-py's asyncio side, and back with the interface's values.

Every ``NatsTransport`` call crosses into asyncio exactly once, as an asyncio task for a nats-py
coroutine (:func:`run_shielded`): the hop cost is paid once per round trip, and a cancelled Trio
caller never cancels nats-py midway. Nothing asyncio-flavoured crosses back: errors are mapped to
the interface's (:func:`map_exception`), headers copied (:func:`headers_of`), and messages for a
Trio reader handed over through a memory channel (:func:`hand_over`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine
from contextlib import suppress
from typing import Any, TypeVar

import nats
import nats.errors
import nats.js.errors
import outcome
import trio
import trio_asyncio
from nats.aio.msg import Msg

from ._errors import Closed, TemporarilyUnavailable, TransportError, TransportTimeout
from ._jetstream_wire import NoResponders, api_error

_log = logging.getLogger(__name__)

T = TypeVar("T")


def map_exception(exc: BaseException, what: str) -> TransportError | None:
    """The interface's error for a nats-py exception, or None when ``exc`` is not nats-py's."""
    if isinstance(exc, TransportError):
        return exc
    if isinstance(exc, nats.js.errors.APIError):
        return api_error(exc.code, exc.err_code, exc.description, what)
    if isinstance(exc, nats.errors.NoRespondersError):
        return NoResponders(f"{what}: no responders")
    if isinstance(exc, TimeoutError):  # nats.errors.TimeoutError and asyncio's
        return TransportTimeout(f"{what}: no answer in time")
    if isinstance(exc, nats.errors.ConnectionClosedError):
        return Closed(f"{what}: connection closed")
    if isinstance(exc, nats.errors.MaxPayloadError):
        # Over the server's max_payload: no retry can store it (the native client's refusal
        # is a plain TransportError too), so not "temporarily unavailable".
        return TransportError(f"{what}: {exc}")
    if isinstance(exc, nats.errors.Error):
        return TemporarilyUnavailable(f"{what}: {exc}")
    return None


def headers_of(msg: Msg) -> dict[str, str]:
    """A nats-py message's headers as a plain dict (empty when it has none)."""
    return dict(msg.headers) if msg.headers else {}


async def hand_over(loop: Any, send: trio.MemorySendChannel[T], item: T) -> None:
    """Pass ``item`` from a nats-py callback (asyncio side) to a Trio reader.

    The callback runs inside the Trio thread (trio-asyncio steps asyncio from a Trio task), so
    the channel's synchronous send is safe; only when the buffer is full does it wait, as a Trio
    task, which also holds nats-py back from calling the next callback (backpressure).
    """
    try:
        send.send_nowait(item)
    except trio.WouldBlock:
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError):
            await trio_asyncio.trio_as_aio(send.send, loop=loop)(item)
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass


async def run_shielded(
    loop: Any,
    coro: Coroutine[Any, Any, T],
    what: str,
    undo: Callable[[T], Coroutine[Any, Any, object]] | None = None,
) -> T:
    """Run ``coro`` as an asyncio task and wait for it; cancelling the wait never cancels it.

    This is why a dropped client could break the connection: trio-asyncio's own
    ``run_aio_coroutine`` cancels the asyncio task when the Trio caller is cancelled, and nats-py
    is not safe against that. A ``flush`` cancelled while its PONG is due leaves its cancelled
    future queued in the client's list of pongs; the PONG then pops it, ``set_result`` raises
    ``InvalidStateError`` inside the read loop, and the connection goes through reconnects that
    meet the same state again (every route answered 503 while the process looked healthy). A
    ``subscribe`` cancelled after its SUB went out also left a subscription nobody owned.

    Here a cancelled caller stops waiting at once (Trio's cancellation is prompt), while the
    task runs on to its own end, bounded by nats-py's own timeouts; nats-py never sees a future
    cancelled under it. What the abandoned task made is released by ``undo`` (an unsubscribe, a
    close). The task holds its error as a value (:func:`_captured`): a task still running when
    the loop closes must not raise into whoever closes it, as an abandoned one would.
    """
    try:
        await trio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        coro.close()  # never started: nothing to undo
        raise
    task: asyncio.Task[outcome.Outcome[T]] = loop.create_task(_captured(coro))
    try:
        await _wait_done(task)
    except BaseException:
        task.add_done_callback(functools.partial(_abandoned, loop, what, undo))
        raise
    if task.cancelled():  # cancelled by nats-py itself, or by the loop closing
        raise Closed(f"{what}: cancelled on the asyncio side")
    try:
        return task.result().unwrap()
    except Exception as exc:
        mapped = map_exception(exc, what)
        if mapped is None:
            raise
        raise mapped from None


def run_detached(
    loop: Any,
    coro: Coroutine[Any, Any, object],
    what: str,
    running: set[asyncio.Task[outcome.Outcome[object]]],
) -> None:
    """Start ``coro`` as an asyncio task and return at once, without waiting for it (no hop
    back, no scheduler pass): for a message nobody waits on, whose loss is harmless (an
    ``ack_nowait``). Its error, if any, is logged at debug level, as an abandoned task's is.
    The event loop keeps only a weak reference to a task, so ``running`` (the caller's own
    set) holds it until it is done: a task nobody holds can be collected before it runs."""
    task: asyncio.Task[outcome.Outcome[object]] = loop.create_task(_captured(coro))
    running.add(task)
    task.add_done_callback(running.discard)
    task.add_done_callback(functools.partial(_abandoned, loop, what, None))


async def _captured(coro: Coroutine[Any, Any, T]) -> outcome.Outcome[T]:
    """asyncio side: ``coro``'s result or error as a value (a cancellation still cancels)."""
    try:
        return outcome.Value(await coro)
    except Exception as exc:
        return outcome.Error(exc)


async def _wait_done(future: asyncio.Future[Any]) -> None:
    """Until ``future`` is done; a cancelled wait leaves the future alone."""
    task = trio.lowlevel.current_task()
    waiting = True

    def wake(_: object) -> None:
        # asyncio runs done callbacks a loop step after completion, so an abort may come in
        # between: only a task still waiting may be rescheduled.
        if waiting:
            trio.lowlevel.reschedule(task)

    def abort(_: object) -> trio.lowlevel.Abort:
        nonlocal waiting
        waiting = False
        future.remove_done_callback(wake)
        return trio.lowlevel.Abort.SUCCEEDED

    future.add_done_callback(wake)
    await trio.lowlevel.wait_task_rescheduled(abort)


def _abandoned(
    loop: Any,
    what: str,
    undo: Callable[[Any], Coroutine[Any, Any, object]] | None,
    task: asyncio.Task[outcome.Outcome[Any]],
) -> None:
    """A task whose caller was cancelled has ended: release what it made, keep its error quiet."""
    if task.cancelled():
        return
    result: outcome.Outcome[Any] = task.result()
    if isinstance(result, outcome.Error):
        _log.debug("%s: finished after its caller left: %r", what, result.error)
        return
    if undo is not None:
        cleanup = loop.create_task(_captured(undo(result.unwrap())))
        cleanup.add_done_callback(functools.partial(_abandoned, loop, f"undo {what}", None))
