"""Headless Chromium (Debian's ``chromium``) driven by Playwright's Python API, and the stack the
console's browser tests run against: a nats-server of the test's own, an engine, and the REST
API (with a token) that can be stopped and started again on its port (a network blip).

A test's browser script runs in a worker thread with its own asyncio loop (:func:`in_browser`,
Playwright's async API); it reaches back into the test's Trio loop with ``trio.from_thread.run``
(to kill a worker, restart the API, append a record) and waits on the page with bounded
``expect`` calls, never a sleep.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio
from playwright.async_api import Page, async_playwright, expect

from dagnats_trio.api import UNSERVED_AFTER_S, Service, console_url
from dagnats_trio.api.rest import create_app
from dagnats_trio.api.server import ApiServer
from dagnats_trio.engine import Engine
from dagnats_trio.inputs import InputsService
from dagnats_trio.server import NatsServer
from dagnats_trio.transport import Transport, open_nats_transport, provision

REPO: Final = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT: Final = REPO / "scripts" / "install-browser"
#: Where the tests write the screenshots docs/console.md shows, with
#: ``DAGNATS_CONSOLE_SHOTS=docs`` (``just screenshots``); otherwise they are still taken, into a
#: temporary directory, so an ordinary test run leaves the checkout clean.
SHOTS_DIR: Final = REPO / "docs" / "console"
SHOTS_ENV: Final = "DAGNATS_CONSOLE_SHOTS"
CHROMIUM: Final = "/usr/bin/chromium"
CHROMIUM_ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
TOKEN: Final = "console-test-token"
#: Bound of each wait on the page (generous: a loaded 2-core machine).
PAGE_WAIT_MS: Final = 20_000
#: Bound of installing the browser (apt-get update and install).
INSTALL_TIMEOUT_S: Final = 600.0
#: Bound of starting the stack.
STACK_START_S: Final = 15.0
#: The API's journal follower polls this often (and wakes on each publish).
API_POLL_INTERVAL_S: Final = 0.1
VIEWPORT: Final = {"width": 1280, "height": 900}


def ensure_chromium() -> None:
    """Install chromium with scripts/install-browser when it is missing; fail (never skip)
    with the script's own words when it cannot."""
    if os.access(CHROMIUM, os.X_OK):
        return
    try:
        done = subprocess.run(
            [str(INSTALL_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.fail(f"the console's browser tests need {CHROMIUM}; {INSTALL_SCRIPT} failed: {exc}")
    if done.returncode != 0 or not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"the console's browser tests need {CHROMIUM}; {INSTALL_SCRIPT} could not install "
            f"it (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
        )


async def in_browser(
    script: Callable[[Page], Awaitable[None]], *, token: str | None = TOKEN
) -> None:
    """Run ``script`` on a fresh page of a fresh headless Chromium, in a worker thread with an
    asyncio loop of its own (the process's asyncio policy is trio-asyncio's, so the loop is
    made explicitly). With ``token`` the tab starts with it stored (as if asked once); an error
    on the page fails the test."""

    async def drive() -> None:
        expect.set_options(timeout=PAGE_WAIT_MS)
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                context = await browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
                context.set_default_timeout(PAGE_WAIT_MS)
                if token is not None:
                    await context.add_init_script(
                        f"sessionStorage.setItem('dagnats.token', {token!r})"
                    )
                page = await context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await script(page)
                assert not errors, f"errors on the page: {errors}"
            finally:
                await browser.close()

    def go() -> None:
        with asyncio.Runner(loop_factory=asyncio.SelectorEventLoop) as runner:
            runner.run(drive())

    await trio.to_thread.run_sync(go)


async def shot(page: Page, name: str) -> None:
    """A screenshot for docs/console.md (taken by the tests, so it stays true)."""
    if os.environ.get(SHOTS_ENV) == "docs":
        path = SHOTS_DIR / f"{name}.png"
    else:
        path = Path(tempfile.gettempdir()) / f"dagnats-console-{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0


@attrs.define
class ConsoleStack:
    """The engine and API on a nats-server of the test's own."""

    transport: Transport
    service: Service
    inputs: InputsService
    nursery: trio.Nursery
    app: Any
    port: int = 0
    _api_scope: trio.CancelScope | None = None
    _api_done: trio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def console(self, run_id: str | None = None, step_id: str | None = None) -> str:
        url = console_url(self.url, run_id)
        return f"{url}/steps/{step_id}" if step_id else url

    async def start_api(self) -> None:
        """Serve the API (on the port it had, after a stop)."""
        scope = trio.CancelScope()
        done = trio.Event()
        server = ApiServer(self.app, "127.0.0.1", self.port)

        async def run(*, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                with scope:
                    await server.run(task_status=task_status)
            finally:
                done.set()

        url: str = await self.nursery.start(run)
        self.port = int(url.rsplit(":", 1)[1].rstrip("/"))
        self._api_scope, self._api_done = scope, done

    async def stop_api(self) -> None:
        """Stop the API: every open connection (a live stream too) is cut."""
        assert self._api_scope is not None and self._api_done is not None
        self._api_scope.cancel()
        with trio.fail_after(STACK_START_S):
            await self._api_done.wait()


@asynccontextmanager
async def open_console_stack(
    server: NatsServer, *, unserved_after_s: float = UNSERVED_AFTER_S
) -> AsyncIterator[ConsoleStack]:
    async with open_nats_transport(server.url, name="pytest-console") as transport:
        await provision(transport)
        service = Service(transport, unserved_after_s=unserved_after_s)
        inputs = InputsService(transport)
        app = create_app(
            service, inputs, transport, token=TOKEN, poll_interval_s=API_POLL_INTERVAL_S
        )
        async with trio.open_nursery() as nursery:
            stack = ConsoleStack(transport, service, inputs, nursery, app)
            with trio.fail_after(STACK_START_S):
                engine = Engine(transport, inputs=inputs, legacy_step_events=False)
                await nursery.start(engine.run)
                await stack.start_api()
            yield stack
            nursery.cancel_scope.cancel()
