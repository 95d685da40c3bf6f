"""Test keys and JWTs: user nkeys for a server's ``authorization`` block, and an operator, an
account and a user JWT for a server in operator mode (what ``nsc`` would make), signed with
nats-io's ``nkeys``."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import attrs
import nkeys

#: Bytes of an Ed25519 seed.
SEED_BYTES = 32


@attrs.frozen
class Key:
    seed: str
    public: str
    pair: Any


def new_key(prefix: int = nkeys.PREFIX_BYTE_USER) -> Key:
    seed = nkeys.encode_seed(os.urandom(SEED_BYTES), prefix)
    pair = nkeys.from_seed(bytearray(seed))
    return Key(seed.decode(), pair.public_key.decode(), pair)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt(claims: dict[str, Any], signer: Key) -> str:
    head = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    body = _b64(json.dumps(claims).encode())
    return f"{head}.{body}.{_b64(signer.pair.sign(f'{head}.{body}'.encode()))}"


def _claims(issuer: Key, subject: Key, name: str, nats: dict[str, Any]) -> dict[str, Any]:
    return {
        "jti": name,
        "iat": int(time.time()),
        "iss": issuer.public,
        "sub": subject.public,
        "name": name,
        "nats": {"version": 2, **nats},
    }


@attrs.frozen
class Operator:
    """An operator, one account it signed, and the server config that trusts them."""

    operator: Key
    account: Key

    def server_config(self, path: Path) -> Path:
        op_jwt = _jwt(
            _claims(self.operator, self.operator, "op", {"type": "operator"}), self.operator
        )
        limits = {"subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
                  "wildcards": True, "conn": -1, "leaf": -1}  # fmt: skip
        account_jwt = _jwt(
            _claims(self.operator, self.account, "acc", {"type": "account", "limits": limits}),
            self.operator,
        )
        path.write_text(
            f"operator: {op_jwt}\nresolver: MEMORY\n"
            f"resolver_preload: {{\n  {self.account.public}: {account_jwt}\n}}\n"
        )
        return path

    def user_jwt(self, user: Key, *, signer: Key | None = None) -> str:
        nats = {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1}
        return _jwt(_claims(signer or self.account, user, "user", nats), signer or self.account)


def new_operator() -> Operator:
    return Operator(new_key(nkeys.PREFIX_BYTE_OPERATOR), new_key(nkeys.PREFIX_BYTE_ACCOUNT))


def write_creds(path: Path, jwt: str, seed: str) -> Path:
    """A ``.creds`` file laid out as ``nsc`` writes it."""
    path.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n"
    )
    return path
