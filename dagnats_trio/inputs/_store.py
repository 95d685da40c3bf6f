"""How the inputs service keeps its records in the KV bucket ``inputs`` (the layout is described in
:mod:`.service`): the keys, the per-message TTLs, and the compare-and-set loops that move a
submission or change a step's index, re-reading on a lost race."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, final

import attrs

from dagnats_trio.protocol import from_json, layout, request_id_token, to_json
from dagnats_trio.transport import KeyExists, RevisionMismatch, Transport

from . import _index
from ._index import IndexEntry, StepIndex
from .errors import ContentionError, NotFoundError
from .submission import InvalidTransition, Mode, Submission

#: Compare-and-set attempts before giving up with :class:`ContentionError`.
MAX_CAS_ATTEMPTS: Final = 64


@final
@attrs.frozen
class StoredSubmission:
    """A submission with the KV revision it was read at (what a compare-and-set needs)."""

    submission: Submission
    revision: int


def submission_key(run_id: str, step_id: str, request_id: str) -> str:
    """Injective in the request id, whatever printable characters it holds."""
    return f"{run_id}.{step_id}.{request_id_token(request_id)}"


def index_key(run_id: str, step_id: str) -> str:
    return f"{run_id}.{step_id}"


def step_prefix(run_id: str, step_id: str) -> str:
    """Prefix of every submission key of a step (the index key itself does not match it)."""
    return f"{run_id}.{step_id}."


def ttl_of(sub: Submission) -> int | None:
    """The per-message TTL of a write of ``sub``: the dedupe window once it is settled."""
    return layout.INPUTS_DEDUPE_TTL_S if sub.status.settled else None


def _index_ttl(index: StepIndex) -> int | None:
    """A closed index goes with the dedupe window too; an open one lives as long as its step."""
    return layout.INPUTS_DEDUPE_TTL_S if index.closed else None


def decode_submission(data: bytes) -> Submission:
    return from_json(data, Submission, "input submission")


def _decode_index(data: bytes) -> StepIndex:
    return from_json(data, StepIndex, "input index")


@final
class SubmissionStore:
    """Reads and compare-and-set writes of submissions and step indexes on one transport."""

    def __init__(self, transport: Transport) -> None:
        self._t = transport

    @staticmethod
    def key_of(sub: Submission) -> str:
        return submission_key(sub.run_id, sub.step_id, sub.request_id)

    async def read(self, key: str) -> StoredSubmission | None:
        entry = await self._t.kv_get(layout.INPUTS_BUCKET, key)
        if entry is None or entry.value is None:
            return None
        return StoredSubmission(decode_submission(entry.value), entry.revision)

    async def require(self, key: str, request_id: str) -> StoredSubmission:
        stored = await self.read(key)
        if stored is None:
            raise NotFoundError(f"no input {request_id!r} for this step", code="input_not_found")
        return stored

    async def transition(
        self, stored: StoredSubmission, move: Callable[[Submission], Submission]
    ) -> StoredSubmission | None:
        """Apply ``move`` by compare-and-set, re-reading on a lost race.

        Returns the stored result, or the current state when ``move`` no longer applies
        (someone else moved it first), or None when the key is gone.
        """
        key = self.key_of(stored.submission)
        current: StoredSubmission | None = stored
        for _ in range(MAX_CAS_ATTEMPTS):
            if current is None:
                return None
            try:
                new = move(current.submission)
            except InvalidTransition:
                return current
            try:
                revision = await self._t.kv_update(
                    layout.INPUTS_BUCKET, key, to_json(new), current.revision, ttl_s=ttl_of(new)
                )
            except RevisionMismatch:
                current = await self.read(key)
                continue
            return StoredSubmission(new, revision)
        raise ContentionError(f"input {stored.submission.request_id!r} kept changing")

    async def read_index(self, run_id: str, step_id: str) -> StepIndex | None:
        entry = await self._t.kv_get(layout.INPUTS_BUCKET, index_key(run_id, step_id))
        if entry is None or entry.value is None:
            return None
        return _decode_index(entry.value)

    async def update_index(
        self,
        run_id: str,
        step_id: str,
        change: Callable[[StepIndex], StepIndex],
        *,
        create_if_missing: bool = True,
    ) -> tuple[StepIndex, StepIndex]:
        """Compare-and-set loop on the step's index; returns (before, after)."""
        key = index_key(run_id, step_id)
        for _ in range(MAX_CAS_ATTEMPTS):
            entry = await self._t.kv_get(layout.INPUTS_BUCKET, key)
            if entry is None or entry.value is None:
                before = StepIndex()
                if not create_if_missing:
                    return before, before
                after = change(before)
                try:
                    await self._t.kv_create(
                        layout.INPUTS_BUCKET, key, to_json(after), ttl_s=_index_ttl(after)
                    )
                except KeyExists:
                    continue
                return before, after
            before = _decode_index(entry.value)
            after = change(before)
            if after == before:
                return before, after
            try:
                await self._t.kv_update(
                    layout.INPUTS_BUCKET,
                    key,
                    to_json(after),
                    entry.revision,
                    ttl_s=_index_ttl(after),
                )
            except RevisionMismatch:
                continue
            return before, after
        raise ContentionError(f"the input index of step {step_id!r} kept changing; try again")

    async def index_add(self, run_id: str, step_id: str, request_id: str, mode: Mode) -> int:
        order = -1

        def add(ix: StepIndex) -> StepIndex:
            nonlocal order
            new, order = _index.with_submission(ix, request_id, mode)
            return new

        await self.update_index(run_id, step_id, add)
        return order

    async def index_close(self, run_id: str, step_id: str) -> tuple[IndexEntry, ...]:
        before, _ = await self.update_index(run_id, step_id, _index.closed)
        return before.queued

    async def drop_from_index(self, run_id: str, step_id: str, request_ids: Iterable[str]) -> None:
        """Remove entries whose submission left ``queued`` (best effort: the record decides)."""
        ids = frozenset(request_ids)
        if not ids:
            return
        await self.update_index(
            run_id, step_id, lambda ix: _index.without(ix, ids), create_if_missing=False
        )
