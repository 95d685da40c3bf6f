"""Which requests name a host other than loopback on an open loopback API: refused (DNS rebinding).

With no token the API is open to whoever reaches it, and the default bind is loopback, which a
browser on that machine reaches too. :mod:`._rest_origin` refuses what a page of another origin
sends, but a DNS rebinding page is not of another origin as far as the browser knows: it is
served from ``evil.example``, whose name then resolves to ``127.0.0.1``, and its requests go to
``http://evil.example:8080`` - same origin, so it may read the answers and act (found from
outside: a request with ``Host: evil.example:8080`` was served). Such a request still carries the
name the page used in its ``Host`` header; a client of the loopback API names a loopback host.
So when the API listens on loopback and has no token, a request whose ``Host`` is not
``localhost``, an address of ``127.0.0.0/8`` or ``[::1]`` (any port) is refused. A token or a
bind other than loopback turns the rule off: the first is what guards such an API, and the
second is reached under names this process cannot know.

Pure: the listen host, the token's presence and the headers in; the refusal's message (or None)
out.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

#: The one name (besides loopback addresses) a client of a loopback API may use.
LOOPBACK_NAME = "localhost"
#: How much of a refused ``Host`` the message quotes.
QUOTED_HOST_MAX_CHARS = 200


def is_loopback_host(host: str) -> bool:
    """Is ``host`` (a name or an address, without port or brackets) a loopback one?"""
    if host.lower() == LOOPBACK_NAME:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def guards_host(listen_host: str | None, token: str | None) -> bool:
    """Is the rule on: the API listens on loopback and has no token?"""
    return not token and listen_host is not None and is_loopback_host(listen_host)


def _host_name(value: str) -> str:
    """The name of a ``Host`` header's value, without its port (and brackets of IPv6)."""
    if value.startswith("["):
        name, sep, rest = value[1:].partition("]")
        return name if sep and (not rest or rest.startswith(":")) else value
    return value.rpartition(":")[0] if ":" in value else value


def host_refusal(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Why a request to an open loopback API is refused for its ``Host``, or None.

    ``headers`` are the ASGI scope's (lower-case names, raw values)."""
    host: bytes | None = None
    for name, value in headers:
        if name == b"host":
            host = value.strip()
            break
    if host is not None and is_loopback_host(_host_name(host.decode("latin-1"))):
        return None
    quoted = repr(host[:QUOTED_HOST_MAX_CHARS].decode("latin-1")) if host is not None else "none"
    return f"the request names host {quoted}, not a loopback one"
