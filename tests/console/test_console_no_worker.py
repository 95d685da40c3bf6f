"""The run page says when a running step waits on a task type no worker polls (issue 13), in
a real browser against a real nats-server; the API's bound is shortened to
:data:`UNSERVED_TEST_S` so the test does not wait the production 30 s."""

from __future__ import annotations

from typing import Final

from playwright.async_api import Page, expect

from dagnats_trio.engine import StepStatus
from dagnats_trio.server import NatsServer

from ._browser import in_browser, open_console_stack
from .test_console_browser import IDLE_TASK, IDLE_WORKFLOW, register_idle, wait_run

#: The API's bound in this test (production: ``UNSERVED_AFTER_S`` = 30 s).
UNSERVED_TEST_S: Final = 1.0


async def test_the_run_page_names_a_task_type_no_worker_polls(
    chromium: None, fresh_nats_server: NatsServer
) -> None:
    async with open_console_stack(fresh_nats_server, unserved_after_s=UNSERVED_TEST_S) as stack:
        await register_idle(stack)
        run_id = await stack.service.start_run(IDLE_WORKFLOW, None)
        await wait_run(stack, run_id, lambda s: s.steps["agent"].status is StepStatus.RUNNING)

        async def script(page: Page) -> None:
            await page.goto(stack.console(run_id))
            hint = page.locator("#steps tr[data-step=agent] [data-hint=no_worker]")
            # The page polls the run: the hint appears once the bound has passed.
            await expect(hint).to_have_text(
                f"no worker has polled task type {IDLE_TASK!r} (none seen)"
            )
            await expect(page.locator("#run-status")).to_have_text("running")

        await in_browser(script)
