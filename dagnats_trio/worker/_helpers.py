"""A delivery's helper tasks (``tc.start_soon``): a nursery opened only when one is started.

A nursery around every handler cost each delivery a scheduler step on its way out (a nursery's
exit checkpoints even when nothing ran in it), and most handlers start no helper. So a delivery
runs its handler in a plain cancel scope, and its first helper opens a nursery in a task of its
own (the host, started in the worker's nursery): the helpers run there, each in the context of
the task that started it. What a nursery around the handler promised still holds:

- a helper's exception fails the delivery: the host keeps it and cancels the delivery's scope,
  so the handler is cancelled as a nursery would cancel it;
- helpers end with the delivery: when the handler's scope is left (it returned, raised, or a
  run cancel or a lost lease cancelled it), :meth:`DeliveryHelpers.close` cancels the host and
  waits until every helper has ended, before the delivery is settled;
- once the delivery is over, ``start_soon`` raises RuntimeError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import final

import trio

HelperFn = Callable[..., Awaitable[object]]


@final
class DeliveryHelpers:
    """The helpers of one delivery; ``scope`` is the delivery's (the handler's) cancel scope."""

    def __init__(self, spawner: trio.Nursery, scope: trio.CancelScope) -> None:
        self._spawner = spawner
        self._delivery_scope = scope
        self._nursery: trio.Nursery | None = None
        self._queued: list[tuple[HelperFn, tuple[object, ...]]] = []
        #: The running host's scope and its end (None: no host runs or is about to).
        self._host_scope: trio.CancelScope | None = None
        self._host_done: trio.Event | None = None
        self._over = False
        #: The first helper exception (a group when several helpers failed at once).
        self.error: Exception | None = None

    def start_soon(self, fn: HelperFn, *args: object) -> None:
        if self._over:
            raise RuntimeError("the delivery is over: a helper can no longer be started")
        if self._nursery is not None:
            # Started from the caller's task, so in its context, as from a nursery of its own.
            self._nursery.start_soon(fn, *args)
            return
        self._queued.append((fn, args))
        if self._host_done is None:
            self._host_scope = trio.CancelScope()
            self._host_done = trio.Event()
            # The host starts in the caller's context; the helpers queued before it runs
            # start in a copy of it.
            self._spawner.start_soon(self._host, self._host_scope, self._host_done)

    async def _host(self, scope: trio.CancelScope, done: trio.Event) -> None:
        try:
            with scope:
                try:
                    async with trio.open_nursery() as nursery:
                        self._nursery = nursery
                        queued, self._queued = self._queued, []
                        for fn, args in queued:
                            nursery.start_soon(fn, *args)
                except ExceptionGroup as group:
                    if self.error is None:
                        self.error = group.exceptions[0] if len(group.exceptions) == 1 else group
                    self._delivery_scope.cancel()
        finally:
            # Every helper has ended: a later start_soon needs a host of its own.
            self._nursery = None
            self._host_scope = None
            self._host_done = None
            done.set()

    async def close(self) -> None:
        """The delivery is over: no more helpers; cancel the running ones and wait for them."""
        self._over = True
        scope, done = self._host_scope, self._host_done
        if scope is None or done is None:
            return
        scope.cancel()
        await done.wait()
