"""The seed of the soak that ``just test`` runs: taken from the commit, so every commit soaks a
different schedule while the same commit always soaks the same one.

``DAGNATS_SOAK_SEED`` overrides it (replaying a failure, or soaking another schedule); without
git (an exported tarball) the fixed fallback is used. Whatever the source, the seed is printed so
that ``just chaos --seed N --runs R`` replays the exact schedule and Trio order.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import attrs

SEED_ENV: Final = "DAGNATS_SOAK_SEED"
#: The seed when neither the variable nor git gives one.
FALLBACK_SEED: Final = 20240611
#: Hex digits of the commit id taken as the seed (32 bits, below ``python -m chaos``'s maximum).
COMMIT_SEED_HEX_DIGITS: Final = 8
#: Bound on ``git rev-parse HEAD``.
GIT_TIMEOUT_S: Final = 10.0


@attrs.frozen
class SoakSeed:
    seed: int
    #: Where it came from: the variable, the commit (with its short id), or the fallback.
    source: str


def soak_seed(repo: Path, environ: Mapping[str, str] = os.environ) -> SoakSeed:
    """The variable if set (a non-negative integer, else ``ValueError``), else the commit of
    ``repo``'s HEAD, else :data:`FALLBACK_SEED`."""
    raw = environ.get(SEED_ENV, "").strip()
    if raw:
        if not (raw.isascii() and raw.isdigit()):
            raise ValueError(f"{SEED_ENV} must be a non-negative integer, got {raw!r}")
        return SoakSeed(int(raw), SEED_ENV)
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return SoakSeed(FALLBACK_SEED, "fallback (no git commit)")
    commit = done.stdout.strip()
    head = commit[:COMMIT_SEED_HEX_DIGITS]
    if len(head) < COMMIT_SEED_HEX_DIGITS or any(c not in "0123456789abcdef" for c in head):
        return SoakSeed(FALLBACK_SEED, "fallback (no git commit)")
    return SoakSeed(int(head, 16), f"commit {head}")
