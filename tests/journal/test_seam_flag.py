"""The crash seams' "no hook" check (``_seams.HOOKS.ever``): one attribute read in production,
and never a decision that misses a hook. A hook installed after seams were passed without one is
reached by the next seam, and a task started while a hook was installed still reaches it after
the ``with`` block that installed it has exited (why the flag is never cleared)."""

from __future__ import annotations

import pytest
import trio

from dagnats_trio._seams import HOOKS, Seam, SeamContext, hook_installed, install_hook
from dagnats_trio.journal import DeliveryState, TaskIdentity

#: Bound (seconds) on each test's own run: nothing here waits on anything but its own tasks.
TEST_DEADLINE_S = 10.0


def _holder() -> DeliveryState:
    return DeliveryState(TaskIdentity("run-1", "agent", 0, 1, "nonce"))


async def test_a_hook_installed_after_seams_without_one_is_reached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(HOOKS, "ever", False)  # production: no hook was ever installed
    holder = _holder()
    seen: list[Seam] = []

    async def hook(ctx: SeamContext) -> None:
        seen.append(ctx.seam)

    assert not hook_installed()
    await holder.seam(Seam.AFTER_CLAIM)  # no hook: nothing reached
    assert seen == []
    with install_hook(hook):
        assert HOOKS.ever and hook_installed()
        await holder.seam(Seam.AFTER_COMMIT)
    assert seen == [Seam.AFTER_COMMIT]
    assert not hook_installed()  # this context's hook is gone; the flag stays set
    assert HOOKS.ever
    await holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
    assert seen == [Seam.AFTER_COMMIT]


async def test_a_task_started_under_a_hook_reaches_it_after_the_install_exits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(HOOKS, "ever", False)
    holder = _holder()
    seen: list[Seam] = []
    go = trio.Event()

    async def hook(ctx: SeamContext) -> None:
        seen.append(ctx.seam)

    async def later() -> None:
        await go.wait()
        if HOOKS.ever:  # the journal's call sites read the flag first
            await holder.seam(Seam.INSIDE_TOOL)

    with trio.fail_after(TEST_DEADLINE_S):
        async with trio.open_nursery() as nursery:
            with install_hook(hook):
                nursery.start_soon(later)  # its context is copied with the hook in it
            assert not hook_installed()
            go.set()
    assert seen == [Seam.INSIDE_TOOL]
