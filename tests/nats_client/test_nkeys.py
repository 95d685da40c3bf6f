"""NATS nkey authentication on real nats-servers: a user nkey listed in the server's
``authorization`` block (a seed file), and a ``.creds`` file (user JWT + seed) on a server in
operator mode; wrong keys are refused with the server's reason and the key offered, and unusable
files are refused before any server is tried, without showing the seed."""

from __future__ import annotations

from pathlib import Path

import nkeys
import pytest
import trio

from dagnats_trio.nats import AuthorizationError, CredentialsError, open_connection
from dagnats_trio.transport import open_trio_nats_transport

from ._nkeys import new_key, new_operator, write_creds
from ._servers import nats_server_with

#: Bound on every test's waits: generous, the machine is shared.
WAIT_S = 20.0


async def _round_trip(url: str, **auth: Path) -> None:
    async with (
        open_connection(url, connect_timeout_s=WAIT_S, **auth) as conn,
        conn.subscribe("nk.echo") as sub,
    ):
        await conn.publish("nk.echo", b"signed in")
        with trio.fail_after(WAIT_S):
            assert (await sub.next_msg()).payload == b"signed in"


async def test_nkey_user_auth_with_a_seed_file(tmp_path: Path) -> None:
    user, stranger = new_key(), new_key()
    config = tmp_path / "nkey.conf"
    config.write_text(f"authorization {{\n  users = [ {{ nkey: {user.public} }} ]\n}}\n")
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(f"# the user's seed\n{user.seed}\n")
    wrong_file = tmp_path / "stranger.nk"
    wrong_file.write_text(stranger.seed + "\n")
    async with nats_server_with("-c", str(config)) as port:
        url = f"nats://127.0.0.1:{port}"
        await _round_trip(url, nkey_seed_file=seed_file)
        with pytest.raises(AuthorizationError) as refused:
            await _round_trip(url, nkey_seed_file=wrong_file)
        message = str(refused.value)
        assert "Authorization Violation" in message
        assert stranger.public in message and str(wrong_file) in message
        assert stranger.seed not in message
        with pytest.raises(AuthorizationError):  # and no key at all
            await _round_trip(url)
        # the transport passes the file on to its connection
        async with open_trio_nats_transport(url, nkey_seed_file=seed_file) as transport:
            await transport.connection.flush()
            assert transport.connection.connected_url == url


async def test_creds_file_auth_in_operator_mode(tmp_path: Path) -> None:
    operator = new_operator()
    config = operator.server_config(tmp_path / "operator.conf")
    user = new_key()
    good = write_creds(tmp_path / "user.creds", operator.user_jwt(user), user.seed)
    # the JWT of one user with another user's seed: the signature does not match the JWT
    stolen = write_creds(tmp_path / "stolen.creds", operator.user_jwt(user), new_key().seed)
    # a user signed by an account the server does not trust
    other = new_key()
    unknown_account = new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    untrusted = write_creds(
        tmp_path / "untrusted.creds",
        operator.user_jwt(other, signer=unknown_account),
        other.seed,
    )
    async with nats_server_with("-c", str(config)) as port:
        url = f"nats://127.0.0.1:{port}"
        await _round_trip(url, creds_file=good)
        for refused in (stolen, untrusted):
            with pytest.raises(AuthorizationError, match="Authorization Violation"):
                await _round_trip(url, creds_file=refused)


async def test_unusable_credentials_are_refused_before_connecting(tmp_path: Path) -> None:
    user, account = new_key(), new_key(nkeys.PREFIX_BYTE_ACCOUNT)
    nowhere = "nats://127.0.0.1:1"  # never tried: the file is read first
    files = {
        "missing.nk": None,
        "account.nk": account.seed,
        "garbage.nk": "SUNOTAVALIDSEED",
        "two.nk": f"{user.seed}\n{user.seed}\n",
    }
    expected = {
        "missing.nk": "cannot read it",
        "account.nk": "not a user seed",
        "garbage.nk": "not valid",
        "two.nk": "expected one nkey seed line, found 2",
    }
    for name, text in files.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(CredentialsError, match=expected[name]) as caught:
            async with open_connection(nowhere, nkey_seed_file=path):
                pass  # pragma: no cover
        assert str(path) in str(caught.value)
        assert account.seed not in str(caught.value) and user.seed not in str(caught.value)
    no_seed = tmp_path / "no-seed.creds"
    no_seed.write_text("-----BEGIN NATS USER JWT-----\na.b.c\n------END NATS USER JWT------\n")
    with pytest.raises(CredentialsError, match="no 'BEGIN USER NKEY SEED' block"):
        async with open_connection(nowhere, creds_file=no_seed):
            pass  # pragma: no cover
    with pytest.raises(CredentialsError, match="not both"):
        async with open_connection(nowhere, creds_file=no_seed, nkey_seed_file=no_seed):
            pass  # pragma: no cover
