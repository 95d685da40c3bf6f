"""Hosting the parts of a process in one Trio nursery (``dagnats dev``, ``serve``, ``worker``,
``demo`` and an embedding service): :class:`Host` composes them (:mod:`._compose`), from
settings checked in :mod:`._settings`.

The settings are imported eagerly and the composition lazily (:mod:`dagnats_trio._lazy`): a
command parses and refuses its options with :mod:`._settings` alone, before Trio, the transport,
the engine and the workers load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dagnats_trio._lazy import lazy_exports

from .._defaults import DEFAULT_LISTEN_HOST, DEFAULT_LISTEN_PORT
from ._settings import (
    HostSetupError,
    Listen,
    ModuleImportFailed,
    checked_backlog,
    import_spec,
    load_handlers,
    merge_handlers,
    parse_listen,
    parse_nats_client,
    parse_nats_urls,
    parse_restart_limit,
    parse_token,
)

if TYPE_CHECKING:
    from ._compose import (
        ANY_NATS_PORT,
        HOST_START_TIMEOUT_S,
        MAX_REPLICAS,
        PROVISION_RETRY_INTERVAL_S,
        Host,
        HostConfig,
        HostInfo,
    )
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._compose": (
                "ANY_NATS_PORT",
                "HOST_START_TIMEOUT_S",
                "MAX_REPLICAS",
                "PROVISION_RETRY_INTERVAL_S",
                "Host",
                "HostConfig",
                "HostInfo",
            ),
        },
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
    "checked_backlog",
    "import_spec",
    "load_handlers",
    "merge_handlers",
    "parse_listen",
    "parse_nats_client",
    "parse_nats_urls",
    "parse_restart_limit",
    "parse_token",
]
