"""Reaching one server: TCP, its INFO, TLS if either side wants it, CONNECT and the first PONG.

A function of the server and the client's settings, with its own :class:`ClientProtocol`; the
connection adopts the stream and the protocol only once the server has answered the PING, so a
failed attempt leaves nothing behind.
"""

from __future__ import annotations

import os
import ssl
from typing import final

import attrs
import trio

from ._credentials import NkeyAuth, parse_creds_file, parse_seed_file
from ._defaults import READ_CHUNK_BYTES, SOCKET_CLOSE_TIMEOUT_S
from ._encoder import PONG_BYTES
from ._errors import ProtocolError
from ._events import Connect, Err, Info, Ping, Pong
from ._parser import NeedData
from ._protocol import ClientProtocol
from ._servers import ServerAddress
from ._shell_errors import AuthorizationError, ConnectionLostError, CredentialsError


@final
@attrs.frozen
class ClientSettings:
    """What the client says about itself in CONNECT (credentials given as arguments win over
    those in a server's URL)."""

    name: str | None
    user: str | None = attrs.field(repr=False)
    password: str | None = attrs.field(repr=False)
    token: str | None = attrs.field(repr=False)
    tls: ssl.SSLContext | None
    nkey: NkeyAuth | None = None

    def connect_event(self, server: ServerAddress, tls: bool, nonce: str | None) -> Connect:
        """The CONNECT for ``server``; with an nkey, the signature of the server's ``nonce``
        and the user JWT (from a ``.creds`` file) or else the public key. Without a nonce the
        server asks for no signature, and none is sent (as nats-py and the Go client do)."""
        jwt = nkey_public = sig = None
        if self.nkey is not None and nonce is not None:
            sig = self.nkey.sign(nonce)
            jwt = self.nkey.jwt
            nkey_public = self.nkey.public_key if jwt is None else None
        return Connect(
            name=self.name,
            tls_required=tls,
            user=self.user if self.user is not None else server.user,
            password=self.password if self.password is not None else server.password,
            auth_token=self.token if self.token is not None else server.token,
            jwt=jwt,
            nkey=nkey_public,
            sig=sig,
            headers=True,
            no_responders=True,
        )

    def describe_refusal(self, server: ServerAddress, message: str) -> str:
        """The error for a refused CONNECT: the server's text, and which nkey was offered."""
        if self.nkey is None:
            return f"{server.url}: {message}"
        return (
            f"{server.url}: {message} (offered nkey {self.nkey.public_key} from {self.nkey.source})"
        )


async def handshake(
    server: ServerAddress, settings: ClientSettings
) -> tuple[trio.abc.Stream, ClientProtocol]:
    """Open ``server`` and complete the handshake; the stream is closed if it fails.
    :class:`AuthorizationError` when the server refuses the credentials."""
    protocol = ClientProtocol()
    tcp = await trio.open_tcp_stream(server.host, server.port)
    stream: trio.abc.Stream = tcp
    try:
        info = await _next_event(stream, protocol)
        if not isinstance(info, Info):
            raise ProtocolError(f"expected INFO first, got {type(info).__name__.upper()}")
        want_tls = server.tls or settings.tls is not None or info.tls_required
        if want_tls:
            if not (info.tls_required or info.tls_available):
                raise ConnectionLostError(f"{server.url}: the server does not offer TLS")
            context = settings.tls or ssl.create_default_context()
            ssl_stream = trio.SSLStream(tcp, context, server_hostname=server.host)
            await ssl_stream.do_handshake()
            stream = ssl_stream
        connect = protocol.send(settings.connect_event(server, want_tls, info.nonce))
        await stream.send_all(connect + protocol.send(Ping()))
        while True:
            event = await _next_event(stream, protocol)
            if isinstance(event, Pong):
                return stream, protocol
            if isinstance(event, Err):
                if "authoriz" in event.message.lower() or "auth" in event.message.lower():
                    raise AuthorizationError(settings.describe_refusal(server, event.message))
                raise ConnectionLostError(f"{server.url}: -ERR {event.message}")
            if isinstance(event, Ping):
                await stream.send_all(PONG_BYTES)
    except BaseException:
        with trio.CancelScope(shield=True), trio.move_on_after(SOCKET_CLOSE_TIMEOUT_S):
            await stream.aclose()
        raise


async def load_nkey_auth(
    *,
    creds_file: str | os.PathLike[str] | None,
    nkey_seed_file: str | os.PathLike[str] | None,
) -> NkeyAuth | None:
    """Read the one credentials file given (none: ``None``); :class:`CredentialsError` names
    the file and what is wrong with it."""
    if creds_file is not None and nkey_seed_file is not None:
        raise CredentialsError("give creds_file or nkey_seed_file, not both")
    path = creds_file if creds_file is not None else nkey_seed_file
    if path is None:
        await trio.lowlevel.checkpoint()
        return None
    source = os.fspath(path)
    try:
        text = await trio.Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"{source}: cannot read it ({type(exc).__name__}: {exc})") from None
    if creds_file is not None:
        return parse_creds_file(text, source=source)
    return parse_seed_file(text, source=source)


async def _next_event(stream: trio.abc.Stream, protocol: ClientProtocol) -> object:
    while True:
        event = protocol.next_event()
        if not isinstance(event, NeedData):
            return event
        data = await stream.receive_some(READ_CHUNK_BYTES)
        if not data:
            raise ConnectionLostError("the server closed the connection during the handshake")
        protocol.receive_data(data)
