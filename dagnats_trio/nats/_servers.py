"""Server URLs: ``nats://[user:pass@|token@]host[:port]`` and ``tls://...``, one or a list."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import final
from urllib.parse import unquote, urlsplit

import attrs

#: The NATS client port when a URL names none.
DEFAULT_PORT = 4222
_SCHEMES = ("nats", "tls")


@final
@attrs.frozen
class ServerAddress:
    """One server to try; credentials from the URL (``repr`` hides them)."""

    host: str
    port: int = DEFAULT_PORT
    tls: bool = False
    user: str | None = attrs.field(default=None, repr=False)
    password: str | None = attrs.field(default=None, repr=False)
    token: str | None = attrs.field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The URL without credentials (for errors and logs)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'tls' if self.tls else 'nats'}://{host}:{self.port}"


def parse_server(url: str) -> ServerAddress:
    """One URL; ``ValueError`` names what is wrong with it."""
    text = url.strip()
    if "://" not in text:
        text = "nats://" + text
    parts = urlsplit(text)
    if parts.scheme not in _SCHEMES:
        raise ValueError(f"server URL {url!r}: scheme must be nats:// or tls://")
    if not parts.hostname:
        raise ValueError(f"server URL {url!r}: no host")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"server URL {url!r}: bad port") from None
    user = unquote(parts.username) if parts.username else None
    password = unquote(parts.password) if parts.password is not None else None
    token = None
    if user is not None and password is None:
        user, token = None, user  # nats://token@host
    return ServerAddress(
        host=parts.hostname,
        port=port,
        tls=parts.scheme == "tls",
        user=user,
        password=password,
        token=token,
    )


def parse_servers(servers: str | Sequence[str]) -> tuple[ServerAddress, ...]:
    """A comma-separated string or a sequence of URLs, in order."""
    urls = servers.split(",") if isinstance(servers, str) else list(servers)
    found = tuple(parse_server(url) for url in urls if url.strip())
    if not found:
        raise ValueError("no server URL given")
    return found


@final
class ServerList:
    """The servers tried on (re)connect, in order: those given, then those the cluster
    announces in INFO ``connect_urls`` (when ``discover`` is on)."""

    def __init__(self, servers: Sequence[ServerAddress], *, discover: bool) -> None:
        self._servers = list(servers)
        self._discover = discover

    def __iter__(self) -> Iterator[ServerAddress]:
        # A copy: a round of connects must not see the list grow under it.
        return iter(tuple(self._servers))

    @property
    def urls(self) -> tuple[str, ...]:
        """The URLs, without credentials."""
        return tuple(server.url for server in self._servers)

    def learn(self, connect_urls: Sequence[str], told_by: ServerAddress) -> None:
        """Add the cluster's other client URLs; they inherit the scheme and URL credentials of
        ``told_by``, the server that announced them. An odd URL is skipped, not raised: a
        server's advertisement must not break the connection."""
        if not self._discover:
            return
        known = {(server.host, server.port) for server in self._servers}
        for url in connect_urls:
            try:
                found = parse_server(url)
            except ValueError:
                continue
            if (found.host, found.port) in known:
                continue
            known.add((found.host, found.port))
            self._servers.append(
                attrs.evolve(
                    told_by,
                    host=found.host,
                    port=found.port,
                )
            )
