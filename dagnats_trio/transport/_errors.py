"""The errors a transport raises.

Callers act differently on each (a fenced writer, a compare-and-set loop, an operator error, a
retry), so each is its own class; they live apart from the interface so a module that only
catches them need not read the whole :class:`~dagnats_trio.transport.Transport` protocol.
"""

from __future__ import annotations

from typing import final

# ---------------------------------------------------------------------------------------------
# Errors. Each is distinct because callers act differently on each: WrongLastSequence is the
# fencing signal, KeyExists / RevisionMismatch drive compare-and-set loops, NotProvisioned is an
# operator error, TemporarilyUnavailable is worth a retry.
# ---------------------------------------------------------------------------------------------


class TransportError(Exception):
    """Base of every error a transport raises."""


@final
class WrongLastSequence(TransportError):
    """The expected last subject sequence did not match: the writer lost the tail (fenced)."""


@final
class KeyExists(TransportError):
    """``kv_create`` found the key already present."""


@final
class RevisionMismatch(TransportError):
    """``kv_update`` (or a revision-checked delete) saw a different revision."""


@final
class NotFound(TransportError):
    """No message at that sequence / no such key / no message on that subject."""


@final
class NotProvisioned(TransportError):
    """The stream, bucket or consumer does not exist, or the stream lacks what the call needs
    (atomic batches: ``StreamSpec.allow_atomic``); run provisioning first."""


class TemporarilyUnavailable(TransportError):
    """No leader or no responders right now (for example during a leader step-down)."""


@final
class TransportTimeout(TransportError):
    """The call got no answer within its deadline."""


@final
class Closed(TransportError):
    """The transport was closed."""
