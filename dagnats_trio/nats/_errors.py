"""The one error of the sans-IO core: the bytes (or an event to send) break the protocol."""

from __future__ import annotations

from typing import final


@final
class ProtocolError(ValueError):
    """Input that is not valid NATS protocol, or an event that cannot be sent.

    The message names the operation and what was wrong with it (a field, a size, a byte), so a
    log line says why a connection was dropped.
    """


def utf8(value: str, what: str) -> bytes:
    """``value`` as UTF-8; a string that has none (a lone surrogate) is a :class:`ProtocolError`
    naming ``what``, not a ``UnicodeEncodeError`` from deep inside an encoder."""
    try:
        return value.encode()
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"{what} {value!r:.64} is not valid UTF-8 ({exc.reason})") from None
