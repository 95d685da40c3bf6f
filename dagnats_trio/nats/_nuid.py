"""Unique, unguessable tokens for inbox subjects (22 base-62 characters, like NATS's nuid)."""

from __future__ import annotations

import secrets

_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: Characters of one token: 62**22 is about 2**131.
NUID_CHARS = 22


def new_nuid() -> str:
    """A fresh random token, safe in a subject."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(NUID_CHARS))


def new_inbox() -> str:
    """A fresh ``_INBOX.<nuid>`` subject."""
    return f"_INBOX.{new_nuid()}"
