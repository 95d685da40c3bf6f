"""A message over the server's ``max_payload``, headers and payload counted together, as
nats-server counts them (an ``HPUB``'s total size), is refused before it is sent.

The native client checks this itself; nats-py checks the payload alone, so a message whose
headers took it over went to the server, which answers ``Maximum Payload Violation`` and closes
the connection (the call timed out and every later one found the connection closed). The nats-py
transport and the simulation check with this, so every transport refuses the same message the
same way: a plain :class:`TransportError` (no retry can store it), nothing sent.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..nats import ProtocolError, encode_headers
from ._errors import TransportError


def check_max_payload(
    max_payload_bytes: int, data: bytes, headers: Mapping[str, str] | None, what: str
) -> None:
    """Raise :class:`TransportError` when ``data`` with the header block of ``headers`` (none
    when empty, as the transports send no block then) is over ``max_payload_bytes``."""
    size = len(data)
    if headers:
        try:
            size += len(encode_headers(headers))
        except ProtocolError as exc:  # what the native transport reports for it
            raise TransportError(f"{what}: {exc}") from None
    if size > max_payload_bytes:
        raise TransportError(
            f"{what}: {size} bytes of headers and payload, over the server's max_payload "
            f"{max_payload_bytes}; nothing was stored"
        )
