"""The crash seams' "no hook" check (``_seams.current_hook() is not None``): one call into C in
production, and never a decision that misses a hook. A hook installed after seams were passed
without one is reached by the next seam, and a task started while a hook was installed still
reaches it after the ``with`` block that installed it has exited (the check is per context,
never cached or process-wide)."""

from __future__ import annotations

import trio

from dagnats_trio._seams import Seam, SeamContext, current_hook, hook_installed, install_hook
from dagnats_trio.journal import DeliveryState, TaskIdentity

#: Bound (seconds) on each test's own run: nothing here waits on anything but its own tasks.
TEST_DEADLINE_S = 10.0


def _holder() -> DeliveryState:
    return DeliveryState(TaskIdentity("run-1", "agent", 0, 1, "nonce"))


async def test_a_hook_installed_after_seams_without_one_is_reached() -> None:
    holder = _holder()
    seen: list[Seam] = []

    async def hook(ctx: SeamContext) -> None:
        seen.append(ctx.seam)

    assert current_hook() is None and not hook_installed()  # production: no hook
    await holder.seam(Seam.AFTER_CLAIM)  # no hook: nothing reached
    assert seen == []
    with install_hook(hook):
        assert current_hook() is hook and hook_installed()
        await holder.seam(Seam.AFTER_COMMIT)
    assert seen == [Seam.AFTER_COMMIT]
    assert current_hook() is None and not hook_installed()  # this context's hook is gone
    await holder.seam(Seam.AFTER_LIFECYCLE_EVENT)
    assert seen == [Seam.AFTER_COMMIT]


async def test_a_task_started_under_a_hook_reaches_it_after_the_install_exits() -> None:
    holder = _holder()
    seen: list[Seam] = []
    go = trio.Event()

    async def hook(ctx: SeamContext) -> None:
        seen.append(ctx.seam)

    async def later() -> None:
        await go.wait()
        if current_hook() is not None:  # what the journal's call sites test first
            await holder.seam(Seam.INSIDE_TOOL)

    with trio.fail_after(TEST_DEADLINE_S):
        async with trio.open_nursery() as nursery:
            with install_hook(hook):
                nursery.start_soon(later)  # its context is copied with the hook in it
            assert current_hook() is None and not hook_installed()
            go.set()
    assert seen == [Seam.INSIDE_TOOL]
