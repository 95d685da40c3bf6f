"""Embedding dagnats-trio in a Trio service: :func:`open_runtime` / :class:`Runtime`, the
:class:`Client` that starts runs and the :class:`RunHandle` each run is followed by.

See docs/embedding.md. The host pieces the CLI composes (``Host``, ``HostConfig``,
``HostInfo``, ``Listen``) are public here too, for a process that wants only some of them.
"""

from __future__ import annotations

from .._host import Host, HostConfig, HostInfo, HostSetupError, Listen, load_handlers
from ._client import DEFAULT_RESULT_TIMEOUT_S, Client, JournalEntry, RunFailed, RunHandle
from ._runtime import Runtime, RuntimeConfig, open_runtime
from ._watch import RESYNC_INTERVAL_S, RunWatch

__all__ = [
    "DEFAULT_RESULT_TIMEOUT_S",
    "RESYNC_INTERVAL_S",
    "Client",
    "Host",
    "HostConfig",
    "HostInfo",
    "HostSetupError",
    "JournalEntry",
    "Listen",
    "RunFailed",
    "RunHandle",
    "RunWatch",
    "Runtime",
    "RuntimeConfig",
    "load_handlers",
    "open_runtime",
]
