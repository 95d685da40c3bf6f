"""The long-running commands: ``dev``, ``serve``, ``worker``, and ``demo``.

Each builds a :class:`HostConfig` and runs :class:`Host` until SIGINT, SIGTERM or SIGHUP (a
closed terminal): ``_hosting``. Declarations only load typer and the named defaults
(``dagnats --help`` reads them); the runtime is imported when a command runs, after the options
a user typed are parsed with the host's light settings module (a bad one is refused first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

import typer

from .._defaults import (
    CLIENT_ENV,
    CLIENTS,
    DEFAULT_ACK_WAIT_S,
    DEFAULT_CLIENT,
    DEFAULT_LISTEN_BACKLOG,
    DEFAULT_LISTEN_HOST,
    DEFAULT_LISTEN_PORT,
    DEFAULT_RESTART_LIMIT,
    MAX_RESTART_LIMIT,
    MIN_RESTART_LIMIT,
)
from ._contract import EXIT_USAGE

DEFAULT_DATA_DIR: Final = "./.dagnats"
DEFAULT_LISTEN: Final = f"{DEFAULT_LISTEN_HOST}:{DEFAULT_LISTEN_PORT}"

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
#: Bounds of ``--ack-wait``: a lease shorter than a tenth of a second is always lost; one over
#: a day leaves a dead worker's task waiting that long (and ``inf`` failed the start with a
#: traceback).
MIN_ACK_WAIT_S: Final = 0.1
MAX_ACK_WAIT_S: Final = 86_400.0
#: The port range of ``--nats-port`` (0: any free one).
MAX_PORT: Final = 65_535
AckWaitOpt = Annotated[
    float,
    typer.Option(
        "--ack-wait", min=MIN_ACK_WAIT_S, max=MAX_ACK_WAIT_S, help="Workers' AckWait in seconds."
    ),
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
        int,
        typer.Option(
            "--nats-port", min=0, max=MAX_PORT, help="Client port of the embedded server (0: any)."
        ),
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
    from .._host import (
        checked_backlog,
        parse_listen,
        parse_nats_client,
        parse_nats_urls,
        parse_restart_limit,
        parse_token,
    )
    from ._say import fail, setup_errors

    if external_nats is not None and nats_port > 0:
        fail("--nats-port is for the embedded server; it cannot go with --nats", EXIT_USAGE)
    with setup_errors():  # refused here, before the host is imported
        nats_urls = parse_nats_urls(external_nats) if external_nats is not None else ()
        listen_at = parse_listen(listen)
        api_token = parse_token(token)
        limit = parse_restart_limit(restart_limit)
        chosen_client = parse_nats_client(client)
        api_backlog = checked_backlog(backlog)
    from .._host import HostConfig
    from ._hosting import load_worker_handlers, run_host, setup_logging

    setup_logging(verbose)
    with setup_errors():
        config = HostConfig(
            nats_urls=nats_urls,
            data_dir=data_dir.resolve() if external_nats is None else None,
            nats_port=nats_port if nats_port > 0 else -1,
            listen=listen_at,
            api_backlog=api_backlog,
            token=api_token,
            legacy_step_events=legacy_step_events,
            bridge=bridge,
            worker_restart_limit=limit,
            handlers=load_worker_handlers(worker),
            worker_ack_wait_s=ack_wait,
            client=chosen_client,
        )
    tasks = ", ".join(sorted(config.handlers)) or "none"
    run_host(
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
    from .._host import (
        checked_backlog,
        parse_listen,
        parse_nats_client,
        parse_nats_urls,
        parse_token,
    )
    from ._say import setup_errors

    with setup_errors():  # refused here, before the host is imported
        nats_urls = parse_nats_urls(nats)
        listen_at = parse_listen(listen)
        api_token = parse_token(token)
        chosen_client = parse_nats_client(client)
        api_backlog = checked_backlog(backlog)
    from .._host import HostConfig
    from ._hosting import run_host, setup_logging

    setup_logging(verbose)
    with setup_errors():
        config = HostConfig(
            nats_urls=nats_urls,
            replicas=replicas,
            listen=listen_at,
            api_backlog=api_backlog,
            token=api_token,
            legacy_step_events=legacy_step_events,
            bridge=bridge,
            worker_ack_wait_s=ack_wait,
            client=chosen_client,
        )
    run_host(
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
    from .._host import parse_nats_client, parse_nats_urls, parse_restart_limit
    from ._say import setup_errors

    with setup_errors():  # refused here, before the host is imported
        nats_urls = parse_nats_urls(nats)
        limit = parse_restart_limit(restart_limit)
        chosen_client = parse_nats_client(client)
    from .._host import HostConfig
    from ._hosting import load_worker_handlers, run_host, setup_logging

    setup_logging(verbose)
    with setup_errors():
        config = HostConfig(
            nats_urls=nats_urls,
            provision=False,
            engine=False,
            listen=None,
            inputs_endpoints=False,
            worker_restart_limit=limit,
            handlers=load_worker_handlers(handlers),
            worker_ack_wait_s=ack_wait,
            client=chosen_client,
        )
    run_host(
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
    from ._hosting import run_demo_command

    run_demo_command(verbose=verbose, keep=keep)


__all__ = ["demo", "dev", "serve", "worker"]
