"""NATS nkey authentication: a user nkey signs the nonce of the server's INFO, and CONNECT
carries the signature with the public key (an nkey user) or with the user JWT (a ``.creds``
file, for servers in operator/JWT mode).

The signing is nats-io's ``nkeys`` package (Ed25519 through PyNaCl), the one nats-py uses; this
module only reads the two file shapes and never shows a seed: not in ``repr``, not in an error.
Pure (text in, signatures out): the connection reads the file.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, final

import nkeys

from ._shell_errors import CredentialsError

#: The block markers of a ``.creds`` file (as ``nsc`` writes them; dashes vary in count).
_JWT_BLOCK: Final = "BEGIN NATS USER JWT"
_SEED_BLOCK: Final = "BEGIN USER NKEY SEED"
#: The first two characters of a user's seed (``S`` for seed, ``U`` for user).
_USER_SEED_PREFIX: Final = "SU"


@final
class NkeyAuth:
    """A user's nkey (and, from a ``.creds`` file, the user JWT); signs server nonces."""

    __slots__ = ("_jwt", "_keys", "_public_key", "_source")

    def __init__(self, seed: str, *, jwt: str | None, source: str) -> None:
        self._source = source
        if not seed.startswith(_USER_SEED_PREFIX):
            raise CredentialsError(
                f"{source}: the nkey seed is not a user seed (it must start with "
                f"{_USER_SEED_PREFIX!r}, got {seed[:2]!r})"
            )
        try:
            self._keys = nkeys.from_seed(bytearray(seed.encode()))
            self._public_key: str = self._keys.public_key.decode()
        except (nkeys.NkeysError, binascii.Error, ValueError, IndexError, TypeError) as exc:
            raise CredentialsError(
                f"{source}: the nkey seed is not valid ({type(exc).__name__})"
            ) from None
        self._jwt = jwt

    def __repr__(self) -> str:
        return f"NkeyAuth(public_key={self._public_key!r}, jwt={self._jwt is not None})"

    @property
    def public_key(self) -> str:
        """The user's public nkey (``U...``): what a server's ``authorization`` block lists."""
        return self._public_key

    @property
    def jwt(self) -> str | None:
        """The user JWT from a ``.creds`` file, or ``None`` for a bare seed."""
        return self._jwt

    @property
    def source(self) -> str:
        """Where the key came from (a file name), for errors."""
        return self._source

    def sign(self, nonce: str) -> str:
        """The signature of ``nonce`` for CONNECT's ``sig`` (base64url, unpadded)."""
        raw: bytes = self._keys.sign(nonce.encode())
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def parse_seed_file(text: str, *, source: str) -> NkeyAuth:
    """An nkey seed file: the user's seed (``SU...``) alone, blank lines and ``#`` comments
    allowed; a ``.creds``-style seed block is taken too."""
    if _SEED_BLOCK in text:
        return NkeyAuth(_block(text, _SEED_BLOCK, source), jwt=None, source=source)
    lines = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    if len(lines) != 1:
        raise CredentialsError(f"{source}: expected one nkey seed line, found {len(lines)}")
    return NkeyAuth(lines[0], jwt=None, source=source)


def parse_creds_file(text: str, *, source: str) -> NkeyAuth:
    """A ``.creds`` file (``nsc`` writes them): a user JWT block and a user nkey seed block."""
    jwt = _block(text, _JWT_BLOCK, source)
    if jwt.count(".") != 2:
        raise CredentialsError(f"{source}: the user JWT block does not hold a JWT")
    return NkeyAuth(_block(text, _SEED_BLOCK, source), jwt=jwt, source=source)


def _block(text: str, marker: str, source: str) -> str:
    """The first non-blank line after the line holding ``marker``."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if marker in line:
            for following in lines[index + 1 :]:
                value = following.strip()
                if value.startswith("---"):
                    break
                if value:
                    return value
            raise CredentialsError(f"{source}: the {marker!r} block is empty")
    raise CredentialsError(f"{source}: no {marker!r} block")
