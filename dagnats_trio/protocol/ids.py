"""The one validator of ids that reach a NATS subject or a KV key, and the request id encoding.

Run ids, step ids, workflow names, task types and signal names are embedded in subjects and keys
as single tokens (``history.{run}``, ``task.{task_type}.{run}``, ``{run}.{name}``), so each must be
1-128 characters of ``[A-Za-z0-9_-]``: a dot would split a token, a wildcard or a space would
address other runs' messages, and a newline makes an invalid subject that is redelivered forever.
The match is a *full* match: ``re.match`` with ``$`` would let a final ``"\\n"`` through.

A request id (an input's ``request_id``) is chosen by chat systems and may hold dots, colons and
any other printable character, so it is not refused but *encoded* into one key-safe token by
:func:`request_id_token`. Pure: no I/O.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from typing import final

#: Longest id (run id, step id, workflow name, task type, signal name), in characters.
ID_MAX_CHARS = 128
#: Longest request id, in characters (code points).
REQUEST_ID_MAX_CHARS = 128
#: What an id may hold, as said in error messages and docs.
ID_RULE = f"1-{ID_MAX_CHARS} characters of letters, digits, '_' or '-'"
REQUEST_ID_RULE = f"1-{REQUEST_ID_MAX_CHARS} printable characters (no control characters)"
#: Starts every encoded request id; never part of an id that is a token as it is.
ENCODED_REQUEST_ID_PREFIX = "="

#: Longest piece of a refused value quoted back in an error message.
_SHOWN_MAX_CHARS = 160

_ID = re.compile(rf"[A-Za-z0-9_-]{{1,{ID_MAX_CHARS}}}")
#: Unicode categories refused in a request id: controls (C0, DEL, C1), surrogates, and the
#: line and paragraph separators (newlines in all but name).
_REFUSED_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})


@final
class InvalidId(ValueError):
    """An id that cannot be used; ``field`` is the name of the field that carried it, so an
    endpoint can answer 400 naming it (``code`` is ``invalid_<field>``)."""

    def __init__(self, field: str, value: object, rule: str = ID_RULE) -> None:
        self.field = field
        self.value = value
        shown = repr(value)
        if len(shown) > _SHOWN_MAX_CHARS:
            shown = shown[:_SHOWN_MAX_CHARS] + "..."
        super().__init__(f"{field} {shown} is not valid: it must be {rule}")

    @property
    def code(self) -> str:
        return f"invalid_{self.field}"


def is_id(value: object) -> bool:
    """True when ``value`` is a usable id (see the module docstring)."""
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def check_id(field: str, value: object) -> str:
    """``value`` if it is a usable id, else :class:`InvalidId` naming ``field``."""
    if not is_id(value):
        raise InvalidId(field, value)
    assert isinstance(value, str)
    return value


def is_request_id(value: object) -> bool:
    """True for 1-128 characters none of which is a control character, a line or paragraph
    separator, or a (lone) surrogate."""
    if not isinstance(value, str) or not 1 <= len(value) <= REQUEST_ID_MAX_CHARS:
        return False
    return not any(unicodedata.category(ch) in _REFUSED_CATEGORIES for ch in value)


def check_request_id(value: object, field: str = "request_id") -> str:
    """``value`` if it is a usable request id, else :class:`InvalidId` naming ``field``."""
    if not is_request_id(value):
        raise InvalidId(field, value, REQUEST_ID_RULE)
    assert isinstance(value, str)
    return value


def request_id_token(request_id: str) -> str:
    """The request id as one subject/key token: injective, stable, and the identity on ids that
    are tokens already (so keys written before request ids were widened stay where they are).

    Any other id becomes ``=`` + its UTF-8 bytes in unpadded base64url; ``=`` never occurs in a
    token id, and base64url of UTF-8 is injective, so no two ids share a token.
    """
    check_request_id(request_id)
    if is_id(request_id):
        return request_id
    encoded = base64.urlsafe_b64encode(request_id.encode("utf-8")).decode("ascii")
    return ENCODED_REQUEST_ID_PREFIX + encoded.rstrip("=")


def request_id_from_token(token: str) -> str:
    """The inverse of :func:`request_id_token` (for tools that read keys)."""
    if not token.startswith(ENCODED_REQUEST_ID_PREFIX):
        return token
    body = token[len(ENCODED_REQUEST_ID_PREFIX) :]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("utf-8")
