"""The worker's commit hook: the inputs an iteration placed are marked done once it commits."""

from __future__ import annotations

from dagnats_trio.inputs import InputsService
from dagnats_trio.journal import CommittedIteration, OnCommitted


def with_mark_done(
    inputs: InputsService | None, on_committed: OnCommitted | None
) -> OnCommitted | None:
    """The commit hook: mark the iteration's placed inputs done, then tell the user's hook.

    Marking is idempotent (already done ids are skipped), so a hook told twice for one commit
    is harmless.
    """
    if inputs is None:
        return on_committed
    service = inputs

    async def committed(info: CommittedIteration) -> None:
        try:
            if info.request_ids:
                await service.mark_committed(info.run_id, info.step_id, info.request_ids)
        finally:
            if on_committed is not None:
                await on_committed(info)

    return committed
