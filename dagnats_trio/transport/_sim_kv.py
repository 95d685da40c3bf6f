"""The key-value requests of a :class:`~._sim.SimTransport`: gets, puts, creates, updates with an
expected revision, deletes and key listings, each one simulated round trip on the connection
and then a read or write of the shared :class:`~._sim_server.SimServer`'s bucket (its TTLs and
watchers are the bucket's, in ``_sim_state``; a watch, which the connection holds open, is in
``_sim``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import trio

from ._errors import KeyExists, RevisionMismatch
from ._jetstream_wire import EXPECTED_LAST_SUBJECT_SEQ, with_ttl
from ._max_payload import check_max_payload
from ._sim_server import SimServer
from ._values import MAX_LAST_MSGS_SUBJECTS, KvEntry


class SimKv(ABC):
    """Key-value requests of :class:`~._sim.SimTransport` (a mixin: the connection holds the
    server and the call plumbing)."""

    _server: SimServer

    @abstractmethod
    async def _call(self, *, jetstream: bool = True) -> None:
        """A request that waits for the server's answer: counts a round trip."""

    async def kv_get(self, bucket: str, key: str) -> KvEntry | None:
        await self._call()
        item = self._server._bucket(bucket).items.get(key)
        if item is None or item.value is None:
            return None
        return KvEntry(bucket, key, item.value, item.revision)

    async def kv_get_many(self, bucket: str, keys: Sequence[str]) -> dict[str, KvEntry]:
        wanted = list(dict.fromkeys(keys))
        for _ in range(0, len(wanted), MAX_LAST_MSGS_SUBJECTS):
            await self._call()  # one round trip per chunk, as on a server
        if not wanted:
            await trio.lowlevel.checkpoint()
        items = self._server._bucket(bucket).items
        found: dict[str, KvEntry] = {}
        for key in wanted:
            item = items.get(key)
            if item is not None and item.value is not None:
                found[key] = KvEntry(bucket, key, item.value, item.revision)
        return found

    async def kv_put(self, bucket: str, key: str, value: bytes) -> int:
        check_max_payload(self._server.max_payload_bytes, value, None, f"put of {key!r}")
        await self._call()
        return self._server._bucket(bucket).write(key, value, trio.current_time())

    async def kv_create(
        self, bucket: str, key: str, value: bytes, *, ttl_s: float | None = None
    ) -> int:
        # The headers of a NATS transport's first try (a create expects no message on the key).
        wire = with_ttl({EXPECTED_LAST_SUBJECT_SEQ: "0"}, ttl_s)
        check_max_payload(self._server.max_payload_bytes, value, wire, f"create of {key!r}")
        await self._call()
        b = self._server._bucket(bucket)
        now = trio.current_time()
        expires_at = b.expiry(ttl_s, now)
        item = b.items.get(key)
        if item is not None and item.value is not None:
            raise KeyExists(f"key {key!r} already exists in bucket {bucket!r}")
        return b.write(key, value, now, expires_at)

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        wire = with_ttl({EXPECTED_LAST_SUBJECT_SEQ: str(revision)}, ttl_s)
        check_max_payload(self._server.max_payload_bytes, value, wire, f"update of {key!r}")
        await self._call()
        b = self._server._bucket(bucket)
        now = trio.current_time()
        expires_at = b.expiry(ttl_s, now)
        current = b.current_revision(key)
        if current != revision:
            raise RevisionMismatch(
                f"key {key!r} in bucket {bucket!r} is at revision {current}, not {revision}"
            )
        return b.write(key, value, now, expires_at)

    async def kv_delete(self, bucket: str, key: str, revision: int | None = None) -> None:
        await self._call()
        b = self._server._bucket(bucket)
        if revision is not None:
            current = b.current_revision(key)
            if current != revision:
                raise RevisionMismatch(
                    f"key {key!r} in bucket {bucket!r} is at revision {current}, not {revision}"
                )
        b.write(key, None, trio.current_time())

    async def kv_keys(self, bucket: str, prefix: str = "") -> list[str]:
        await self._call()
        b = self._server._bucket(bucket)
        return sorted(
            k for k, item in b.items.items() if item.value is not None and k.startswith(prefix)
        )
