"""Which requests a web page of another origin made: refused, so no page can act through the API.

Without a token the API is open to whoever reaches it, and the default is loopback; but a browser
on that machine reaches loopback too, and any page it shows may send a "simple" cross-origin
request (a form post, or ``fetch`` with ``mode: "no-cors"`` and a ``text/plain`` body) without
asking first. The API read any body as JSON whatever its ``Content-Type``, so such a page could
start runs, send inputs into a running agent's context (prompt injection) and cancel runs; the
page never sees the answer, but the side effect is done. Found from outside: ``POST /runs`` with
``Content-Type: text/plain`` started a run.

The rule is the one browsers make possible and Go's ``http.CrossOriginProtection`` applies: a
request with an unsafe method is refused when the browser says it came from another site
(``Sec-Fetch-Site`` other than ``same-origin`` or ``none``), or, from a browser that does not send
``Sec-Fetch-Site``, when its ``Origin`` names another host than the request's ``Host``. Clients
that are not browsers (the CLI, curl, the bridge's workers, the tests) send neither header and
are not affected; the console at ``/ui/`` is same-origin. ``Sec-Fetch-Site`` is checked first so
that a console behind a reverse proxy that rewrites ``Host`` keeps working. Reads (``GET``,
``HEAD``, ``OPTIONS``) change nothing, and the browser keeps their answers from the other page.

Pure: the headers in, the refusal's message (or None) out.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

#: Methods that change nothing on this API: never refused here.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: ``Sec-Fetch-Site`` values of a request the user made on this origin (or typed in).
SAME_ORIGIN_FETCH_SITES = frozenset({b"same-origin", b"none"})
#: How much of a refused header the message quotes.
QUOTED_HEADER_MAX_CHARS = 200


def _quoted(value: bytes) -> str:
    return repr(value[:QUOTED_HEADER_MAX_CHARS].decode("latin-1"))


def cross_origin_refusal(method: str, headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Why a request from a web page of another origin is refused, or None to let it through.

    ``headers`` are the ASGI scope's (lower-case names, raw values)."""
    if method in SAFE_METHODS:
        return None
    fetch_site = origin = host = None
    for name, value in headers:
        if name == b"sec-fetch-site":
            fetch_site = value.strip().lower()
        elif name == b"origin":
            origin = value.strip()
        elif name == b"host":
            host = value.strip().lower()
    if fetch_site is not None:
        if fetch_site in SAME_ORIGIN_FETCH_SITES:
            return None
        return (
            f"a browser sent this request from another site (Sec-Fetch-Site: {_quoted(fetch_site)})"
        )
    if origin is None:
        return None
    origin_host = urlsplit(origin.decode("latin-1")).netloc.lower().encode("latin-1")
    if host is not None and origin_host == host:
        return None
    return (
        f"a browser sent this request from another origin (Origin: {_quoted(origin)}, "
        f"Host: {_quoted(host or b'')})"
    )
