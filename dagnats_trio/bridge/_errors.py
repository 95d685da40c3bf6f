"""The bridge's answers other than success, independent of HTTP framing.

The HTTP layer turns a :class:`BridgeError` into the REST error shape
``{"error": {"code", "message"}}`` with :attr:`BridgeError.status`; the codes are part of the
bridge's contract (docs/bridge.md), so a client in any language can act on them.
"""

from __future__ import annotations

from typing import final


@final
class BridgeError(Exception):
    """An expected failure of a bridge action: a status, a stable code and a readable message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def bad_request(message: str, code: str = "invalid_body") -> BridgeError:
    return BridgeError(400, code, message)


def lease_not_found(token: str) -> BridgeError:
    return BridgeError(
        404,
        "lease_not_found",
        "no such lease (unknown token, or dropped after it expired); poll for a task again",
    )


def fenced(message: str) -> BridgeError:
    return BridgeError(409, "fenced", message)


def cancelled(run_id: str) -> BridgeError:
    return BridgeError(409, "cancelled", f"run {run_id!r} was cancelled; stop working on it")


def gone(code: str, message: str) -> BridgeError:
    """The task is finished for this lease (stale, committed, restart_limit, settled, expired)."""
    return BridgeError(410, code, message)
