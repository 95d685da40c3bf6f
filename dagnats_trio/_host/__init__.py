"""Hosting the parts of a process in one Trio nursery (``dagnats dev``, ``serve``, ``worker``,
``demo`` and an embedding service): :class:`Host` composes them (:mod:`._compose`), from
settings checked in :mod:`._settings`."""

from .._defaults import DEFAULT_LISTEN_HOST, DEFAULT_LISTEN_PORT
from ._compose import (
    ANY_NATS_PORT,
    HOST_START_TIMEOUT_S,
    MAX_REPLICAS,
    PROVISION_RETRY_INTERVAL_S,
    Host,
    HostConfig,
    HostInfo,
)
from ._settings import (
    HostSetupError,
    Listen,
    ModuleImportFailed,
    import_spec,
    load_handlers,
    merge_handlers,
    parse_listen,
    parse_nats_client,
    parse_nats_urls,
    parse_restart_limit,
    parse_token,
)

__all__ = [
    "ANY_NATS_PORT",
    "DEFAULT_LISTEN_HOST",
    "DEFAULT_LISTEN_PORT",
    "HOST_START_TIMEOUT_S",
    "MAX_REPLICAS",
    "PROVISION_RETRY_INTERVAL_S",
    "Host",
    "HostConfig",
    "HostInfo",
    "HostSetupError",
    "Listen",
    "ModuleImportFailed",
    "import_spec",
    "load_handlers",
    "merge_handlers",
    "parse_listen",
    "parse_nats_client",
    "parse_nats_urls",
    "parse_restart_limit",
    "parse_token",
]
