"""The long-running commands: ``dev``, ``serve``, ``worker``, and ``demo``.

Each builds a :class:`HostConfig` and runs :class:`Host` until SIGINT, SIGTERM or SIGHUP (a
closed terminal). The signals are taken with ``trio.open_signal_receiver`` rather than left to
Trio's KeyboardInterrupt, so a stop always goes through cancellation: every part unwinds in order
and the embedded nats-server child is stopped by its (shielded) ``finally``, whichever moment the
signal arrives. Should this process die without unwinding (SIGKILL), the child gets a parent-death
signal from the kernel (``dagnats_trio.server``).
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Final

import trio
import typer
from rich.logging import RichHandler

from .._host import (
    DEFAULT_LISTEN_HOST,
    DEFAULT_LISTEN_PORT,
    Host,
    HostConfig,
    HostInfo,
    HostSetupError,
    ModuleImportFailed,
    load_handlers,
    merge_handlers,
    parse_listen,
    parse_nats_client,
    parse_nats_urls,
    parse_restart_limit,
)
from ..api import console_url
from ..api.server import DEFAULT_LISTEN_BACKLOG
from ..journal import DEFAULT_RESTART_LIMIT, MAX_RESTART_LIMIT, MIN_RESTART_LIMIT
from ..server import NatsServerError, PortInUse, StoreLocked
from ..transport import (
    CLIENT_ENV,
    CLIENTS,
    DEFAULT_CLIENT,
    NotProvisioned,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
)
from ..worker import DEFAULT_ACK_WAIT_S, Handler
from ._client import EXIT_CANNOT_CONNECT, EXIT_FAILED, EXIT_USAGE
from ._common import console, fail, leaf

DEFAULT_DATA_DIR: Final = "./.dagnats"
DEFAULT_LISTEN: Final = f"{DEFAULT_LISTEN_HOST}:{DEFAULT_LISTEN_PORT}"
#: A closed terminal sends SIGHUP: a stop like any other, never a Python that dies and leaves its
#: nats-server child behind.
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

ListenOpt = Annotated[
    str, typer.Option("--listen", envvar="DAGNATS_LISTEN", help="Address of the REST API.")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="DAGNATS_API_TOKEN",
        help="Require this bearer token on every route but /healthz.",
        show_default=False,
    ),
]
LegacyOpt = Annotated[
    bool | None,
    typer.Option(
        "--legacy-step-events/--no-legacy-step-events",
        envvar="DAGNATS_LEGACY_STEP_EVENTS",
        help="Accept lifecycle events without a dispatch identity (default on; turn off once "
        "every worker is upgraded).",
        show_default=False,
    ),
]
BacklogOpt = Annotated[
    int,
    typer.Option(
        "--backlog",
        envvar="DAGNATS_API_BACKLOG",
        help="Listen backlog of the REST API: connections queued before they are accepted "
        "(the kernel caps it at net.core.somaxconn).",
    ),
]
BridgeOpt = Annotated[
    bool,
    typer.Option(
        "--bridge/--no-bridge",
        envvar="DAGNATS_BRIDGE",
        help="Serve the HTTP worker bridge (/bridge/...) on the API (default on).",
    ),
]
WorkerOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--worker",
        help="module:attr naming a Mapping[str, Handler] (task type -> handler); repeatable.",
        show_default=False,
    ),
]
NatsOpt = Annotated[
    str,
    typer.Option("--nats", envvar="DAGNATS_NATS_URL", help="NATS server URL(s), comma separated."),
]
AckWaitOpt = Annotated[
    float, typer.Option("--ack-wait", min=0.1, help="Workers' AckWait in seconds.")
]
RestartLimitOpt = Annotated[
    str,
    typer.Option(
        "--restart-limit",
        envvar="DAGNATS_RESTART_LIMIT",
        metavar="N",
        help=f"Workers' restart_limit ({MIN_RESTART_LIMIT} to {MAX_RESTART_LIMIT}): a journal "
        "step fails (reason restart_limit) after N claims in a row without progress.",
    ),
]
ClientOpt = Annotated[
    str,
    typer.Option(
        "--client",
        envvar=CLIENT_ENV,
        metavar="|".join(CLIENTS),
        help="The NATS client: native (the Trio client, default) or nats-py (docs/nats-client.md).",
    ),
]
VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Log debug details.")]


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=console(stderr=True), show_path=False)],
    )


def _banner(
    title: str, info: HostInfo, extra: list[tuple[str, str]], *, token_required: bool
) -> None:
    out = console()
    out.print(f"[bold]dagnats {title}[/]", highlight=False)
    rows = [("nats", ",".join(info.nats_urls))]
    if info.server is not None:
        rows.append(("nats-server pid", str(info.server.pid)))
    if info.api_url is not None:
        rows.append(("api", info.api_url))
        rows.append(("console", console_url(info.api_url)))
    if info.worker is not None:
        rows.append(("worker", info.worker.worker_id))
    if info.api_url is not None:
        rows.append(("token", "required" if token_required else "not required (no --token)"))
    rows.extend(extra)
    exports = [f"DAGNATS_NATS_URL={','.join(info.nats_urls)}"]
    if info.api_url is not None:
        exports.append(f"DAGNATS_API_URL={info.api_url}")
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


def _run_host(config: HostConfig, title: str, extra: list[tuple[str, str]]) -> None:
    try:
        trio.run(_host_until_signal, config, title, extra)
    except BaseException as exc:
        inner = leaf(exc)
        if isinstance(inner, HostSetupError):
            fail(str(inner), EXIT_USAGE)
        if isinstance(inner, TemporarilyUnavailable | TransportTimeout):
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


def _handlers(specs: list[str] | None) -> dict[str, Handler]:
    try:
        return dict(merge_handlers([load_handlers(s) for s in specs or []]))
    except ModuleImportFailed as exc:
        # The module's own traceback (its frames only), then the one-line error last.
        sys.stderr.write(exc.module_traceback)
        fail(str(exc), EXIT_USAGE)
    except HostSetupError as exc:
        fail(str(exc), EXIT_USAGE)


def dev(
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir", envvar="DAGNATS_DATA_DIR", help="Where the embedded server keeps data."
        ),
    ] = Path(DEFAULT_DATA_DIR),
    listen: ListenOpt = DEFAULT_LISTEN,
    worker: WorkerOpt = None,
    token: TokenOpt = None,
    legacy_step_events: LegacyOpt = None,
    bridge: BridgeOpt = True,
    backlog: BacklogOpt = DEFAULT_LISTEN_BACKLOG,
    nats_port: Annotated[
        int, typer.Option("--nats-port", help="Client port of the embedded server (0: any).")
    ] = 0,
    ack_wait: AckWaitOpt = DEFAULT_ACK_WAIT_S,
    restart_limit: RestartLimitOpt = str(DEFAULT_RESTART_LIMIT),
    external_nats: Annotated[
        str | None,
        typer.Option(
            "--nats",
            help="Use this NATS server (URLs, comma separated) instead of an embedded one; "
            "it is provisioned, and left running when dev stops.",
        ),
    ] = None,
    client: ClientOpt = DEFAULT_CLIENT,
    verbose: VerboseOpt = False,
) -> None:
    """Everything in one process on an embedded nats-server (engine, API, workers).

    With ``--nats`` the engine, API and workers run against that server instead (for example
    one a test stops and restarts); dev never starts or stops it. No environment variable sets
    it: the ``DAGNATS_NATS_URL`` a dev prints for other shells must not turn the next dev into
    a client of the last one."""
    _setup_logging(verbose)
    if external_nats is not None and nats_port > 0:
        fail("--nats-port is for the embedded server; it cannot go with --nats", EXIT_USAGE)
    try:
        config = HostConfig(
            nats_urls=parse_nats_urls(external_nats) if external_nats is not None else (),
            data_dir=data_dir.resolve() if external_nats is None else None,
            nats_port=nats_port if nats_port > 0 else -1,
            listen=parse_listen(listen),
            api_backlog=backlog,
            token=token or None,
            legacy_step_events=legacy_step_events,
            bridge=bridge,
            worker_restart_limit=parse_restart_limit(restart_limit),
            handlers=_handlers(worker),
            worker_ack_wait_s=ack_wait,
            client=parse_nats_client(client),
        )
    except HostSetupError as exc:
        fail(str(exc), EXIT_USAGE)
    tasks = ", ".join(sorted(config.handlers)) or "none"
    _run_host(
        config,
        "dev",
        [
            ("data dir", str(config.data_dir))
            if external_nats is None
            else ("server", "external: left running when dev stops"),
            ("sync", "always (single node)" if external_nats is None else "the server's own"),
            ("tasks", tasks),
            ("api backlog", str(config.api_backlog)),
            ("restart limit", str(config.worker_restart_limit)),
        ],
    )


def serve(
    nats: NatsOpt,
    listen: ListenOpt = DEFAULT_LISTEN,
    replicas: Annotated[
        int, typer.Option("--replicas", min=1, max=5, help="Replicas of streams and buckets.")
    ] = 1,
    token: TokenOpt = None,
    legacy_step_events: LegacyOpt = None,
    bridge: BridgeOpt = True,
    backlog: BacklogOpt = DEFAULT_LISTEN_BACKLOG,
    ack_wait: AckWaitOpt = DEFAULT_ACK_WAIT_S,
    client: ClientOpt = DEFAULT_CLIENT,
    verbose: VerboseOpt = False,
) -> None:
    """Engine, REST API and inputs endpoints against an existing NATS server or cluster.

    ``--ack-wait`` is the workers' AckWait, which the bridge's leases share (they come from the
    same consumers): give it the value the workers of this deployment run with."""
    _setup_logging(verbose)
    try:
        config = HostConfig(
            nats_urls=parse_nats_urls(nats),
            replicas=replicas,
            listen=parse_listen(listen),
            api_backlog=backlog,
            token=token or None,
            legacy_step_events=legacy_step_events,
            bridge=bridge,
            worker_ack_wait_s=ack_wait,
            client=parse_nats_client(client),
        )
    except HostSetupError as exc:
        fail(str(exc), EXIT_USAGE)
    _run_host(
        config,
        "serve",
        [
            ("replicas", str(replicas)),
            ("api backlog", str(config.api_backlog)),
            ("ack wait", f"{config.worker_ack_wait_s} s"),
        ],
    )


def worker(
    handlers: Annotated[
        list[str], typer.Argument(metavar="MODULE:HANDLERS...", help="module:attr, repeatable.")
    ],
    nats: NatsOpt,
    ack_wait: AckWaitOpt = DEFAULT_ACK_WAIT_S,
    restart_limit: RestartLimitOpt = str(DEFAULT_RESTART_LIMIT),
    client: ClientOpt = DEFAULT_CLIENT,
    verbose: VerboseOpt = False,
) -> None:
    """Workers only, against an existing NATS server or cluster (provisioned by serve/dev)."""
    _setup_logging(verbose)
    try:
        config = HostConfig(
            nats_urls=parse_nats_urls(nats),
            provision=False,
            engine=False,
            listen=None,
            inputs_endpoints=False,
            worker_restart_limit=parse_restart_limit(restart_limit),
            handlers=_handlers(handlers),
            worker_ack_wait_s=ack_wait,
            client=parse_nats_client(client),
        )
    except HostSetupError as exc:
        fail(str(exc), EXIT_USAGE)
    _run_host(
        config,
        "worker",
        [
            ("tasks", ", ".join(sorted(config.handlers))),
            ("restart limit", str(config.worker_restart_limit)),
        ],
    )


#: ``dagnats demo --keep``.
KeepOpt = Annotated[
    bool,
    typer.Option("--keep", help="keep the API and its console open after the demo (Ctrl-C)"),
]


def demo(verbose: VerboseOpt = False, keep: KeepOpt = False) -> None:
    """An agent's worker dies mid unsafe tool call; a new one recovers; journal and check."""
    from .demo import DemoResult, run_demo

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.ERROR,
        format="%(name)s: %(message)s",
        handlers=[RichHandler(console=console(stderr=True), show_path=False)],
    )
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
