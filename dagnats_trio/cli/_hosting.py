"""Running a long-lived command: logging, the banner, and a :class:`Host` until a stop signal.

The signals are taken with ``trio.open_signal_receiver`` rather than left to Trio's
KeyboardInterrupt, so a stop always goes through cancellation: every part unwinds in order and
the embedded nats-server child is stopped by its (shielded) ``finally``, whichever moment the
signal arrives. Should this process die without unwinding (SIGKILL), the child gets a
parent-death signal from the kernel (``dagnats_trio.server``).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator
from typing import Final

import trio
import typer
from rich.logging import RichHandler

from .._host import (
    Host,
    HostConfig,
    HostInfo,
    HostSetupError,
    ModuleImportFailed,
    load_handlers,
    merge_handlers,
)
from ..api import console_url
from ..nats import NoServersError
from ..server import NatsServerError, PortInUse, StoreLocked
from ..transport import (
    NotProvisioned,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
)
from ..worker import Handler
from ._common import leaf
from ._contract import EXIT_CANNOT_CONNECT, EXIT_FAILED, EXIT_USAGE
from ._say import console, fail

#: A closed terminal sends SIGHUP: a stop like any other, never a Python that dies and leaves its
#: nats-server child behind.
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def setup_logging(verbose: bool, *, quiet: bool = False) -> None:
    """Log records on stderr through rich: debug with ``verbose``, errors only with ``quiet``
    (the demo tells its own story), else info."""
    level = logging.DEBUG if verbose else logging.ERROR if quiet else logging.INFO
    logging.basicConfig(
        level=level,
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=console(stderr=True), show_path=False)],
    )


#: A listening host that names every interface, and the loopback address a client on this machine
#: reaches it at.
WILDCARD_HOSTS: Final = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}


def reachable_url(api_url: str) -> str:
    """``api_url`` as a client can use it: a wildcard bind (``--listen 0.0.0.0:8080``) is
    reached at loopback on this machine. Found from outside: the banner's export said
    ``DAGNATS_API_URL=http://0.0.0.0:8080``, an address to bind, not to connect to."""
    scheme, sep, rest = api_url.partition("://")
    host, colon, port = rest.rpartition(":")
    if sep and colon and host in WILDCARD_HOSTS:
        return f"{scheme}://{WILDCARD_HOSTS[host]}:{port}"
    return api_url


def _banner(
    title: str, info: HostInfo, extra: list[tuple[str, str]], *, token_required: bool
) -> None:
    out = console()
    out.print(f"[bold]dagnats {title}[/]", highlight=False)
    rows = [("nats", ",".join(info.nats_urls))]
    if info.server is not None:
        rows.append(("nats-server pid", str(info.server.pid)))
    api_url = reachable_url(info.api_url) if info.api_url is not None else None
    if info.api_url is not None and api_url is not None:
        rows.append(("api", api_url))
        if api_url != info.api_url:
            rows.append(("listening on", info.api_url))  # every interface
        rows.append(("console", console_url(api_url)))
    if info.worker is not None:
        rows.append(("worker", info.worker.worker_id))
    if info.api_url is not None:
        rows.append(("token", "required" if token_required else "not required (no --token)"))
    rows.extend(extra)
    exports = [f"DAGNATS_NATS_URL={','.join(info.nats_urls)}"]
    if api_url is not None:
        exports.append(f"DAGNATS_API_URL={api_url}")
    # What a worker or a CLI verb in another shell needs to find this process.
    rows.append(("other shells", "export " + " ".join(exports)))
    for name, value in rows:
        # One plain line per setting: easy to read, and to parse from a script.
        out.print(f"  {name + ':':<17}{value}", highlight=False, soft_wrap=True)
    out.print("  ready (Ctrl-C to stop)", highlight=False)


async def _host_until_signal(config: HostConfig, title: str, extra: list[tuple[str, str]]) -> None:
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async with trio.open_nursery() as nursery:
            # Watching from the start: a Ctrl-C during a slow start-up stops it too.
            nursery.start_soon(_cancel_on_signal, signals, nursery.cancel_scope)
            info: HostInfo = await nursery.start(Host(config).run)
            _banner(title, info, extra, token_required=config.token is not None)


async def _cancel_on_signal(signals: AsyncIterator[int], scope: trio.CancelScope) -> None:
    async for signum in signals:
        console(stderr=True).print(f"{signal.Signals(signum).name}: stopping", highlight=False)
        scope.cancel()
        return


def run_host(config: HostConfig, title: str, extra: list[tuple[str, str]]) -> None:
    try:
        trio.run(_host_until_signal, config, title, extra)
    except BaseException as exc:
        inner = leaf(exc)
        if isinstance(inner, HostSetupError):
            fail(str(inner), EXIT_USAGE)
        if isinstance(inner, TemporarilyUnavailable | TransportTimeout | NoServersError):
            fail(f"cannot connect to NATS: {inner}", EXIT_CANNOT_CONNECT)
        if isinstance(inner, NotProvisioned):
            fail(
                f"the JetStream streams are missing ({inner}); start `dagnats serve` (which "
                "provisions them) first",
                EXIT_FAILED,
            )
        if isinstance(inner, StoreLocked):
            holder = f"pid {inner.holder_pid}" if inner.holder_pid is not None else "another"
            fail(
                f"the data directory {config.data_dir} is in use by another process ({holder}); "
                "stop it or give another --data-dir",
                EXIT_FAILED,
            )
        if isinstance(inner, PortInUse):
            fail(
                f"--nats-port {inner.port} is already in use; stop what listens there", EXIT_FAILED
            )
        if isinstance(inner, NatsServerError):
            fail(f"the embedded nats-server failed: {inner}", EXIT_FAILED)
        if isinstance(inner, TransportError):
            fail(f"NATS refused: {inner}", EXIT_FAILED)
        if isinstance(inner, OSError) and inner.filename is not None:
            # a path (the data directory, say), not the listening socket
            fail(f"cannot use {inner.filename}: {inner.strerror or inner}", EXIT_FAILED)
        if isinstance(inner, OSError) and config.listen is not None:
            fail(f"cannot listen on {config.listen}: {inner.strerror or inner}", EXIT_FAILED)
        if isinstance(inner, OSError):
            fail(f"the NATS connection failed: {inner.strerror or inner}", EXIT_FAILED)
        if isinstance(inner, trio.TooSlowError):
            fail("start-up took too long (is NATS reachable?)", EXIT_CANNOT_CONNECT)
        if isinstance(inner, KeyboardInterrupt):
            raise typer.Exit(0) from None
        raise
    console(stderr=True).print("stopped", highlight=False)


def load_worker_handlers(specs: list[str] | None) -> dict[str, Handler]:
    try:
        return dict(merge_handlers([load_handlers(s) for s in specs or []]))
    except ModuleImportFailed as exc:
        # The module's own traceback (its frames only), then the one-line error last.
        sys.stderr.write(exc.module_traceback)
        fail(str(exc), EXIT_USAGE)
    except HostSetupError as exc:
        fail(str(exc), EXIT_USAGE)


def run_demo_command(*, verbose: bool, keep: bool) -> None:
    """``dagnats demo``: the story, then exit 0 when it ended as it should, else 1."""
    from .demo import DemoResult, run_demo

    setup_logging(verbose, quiet=True)
    out = console()
    results: list[DemoResult] = []

    async def go() -> bool:
        keep_until = trio.Event() if keep else None
        with trio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    async for _ in signals:
                        if keep_until is not None and results:
                            # The story is over: stop the kept console cleanly.
                            keep_until.set()
                        else:
                            nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                await run_demo(out, keep_until=keep_until, on_result=results.append)
                nursery.cancel_scope.cancel()
        return bool(results) and results[0].ok

    try:
        ok = trio.run(go)
    except BaseException as exc:
        inner = leaf(exc)
        if isinstance(inner, NatsServerError):
            fail(f"the embedded nats-server failed: {inner}", EXIT_FAILED)
        if isinstance(inner, trio.TooSlowError):
            fail("the demo took too long", EXIT_FAILED)
        raise
    if not ok:
        out.print("[bold red]the demo did not end as expected[/]")
    raise typer.Exit(0 if ok else EXIT_FAILED)


__all__ = [
    "STOP_SIGNALS",
    "load_worker_handlers",
    "reachable_url",
    "run_demo_command",
    "run_host",
    "setup_logging",
]
