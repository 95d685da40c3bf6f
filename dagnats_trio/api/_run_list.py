"""Listing runs newest first, a page at a time, from the run index (``engine._run_index``).

Two ways to a page, both newest first:

- every run, or filtered by workflow or by a finished status: the ``RUN_INDEX`` stream is read
  backwards in windows of sequences from its last message (or from the cursor), the workflow
  filter is applied to the index entries, and the snapshots of the candidates are read together.
  A request examines at most :data:`LIST_SCAN_ENTRIES_MAX` index entries, so a rare filter may
  answer a short page with a cursor to go on from (never a long request).
- ``status=running``: the ``RUN_ACTIVE`` stream holds one marker per run that may be running;
  all of them are read (what the running runs cost, not what the store holds), newest first.

The cursor names the sequence to continue below, in the stream the page came from: ``i<seq>``
(index) or ``a<seq>`` (active markers). Runs started while a caller pages get higher sequences,
so they never shift later pages: no run is listed twice and none is skipped.

The snapshot is the truth. An index entry without a snapshot (a start that crashed before the
snapshot, or a purge under way) is left out; a marker whose snapshot is finished is left out and
removed (see ``engine._run_index`` on how the index converges after a crash).

Reads go through :func:`_read_index_window`, :func:`_read_markers` and :func:`_read_snapshots`
only, each a batch direct get (a window of the index from a sequence, the markers, a page's
snapshots as the last message of each key), so a page is a handful of requests.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import attrs

from ..engine import RunSnapshot, decode_snapshot, drop_active
from ..protocol import DecodeError, RunIndexEntry, RunStatus, decode_run_index_entry, layout
from ..transport import MAX_GET_BATCH_MSGS, StoredMsg, Transport, TransportError

#: The active stream's sentinel, not a marker (``transport.provision``).
_ACTIVE_SENTINEL = layout.sentinel_subject(layout.RUN_ACTIVE_STREAM)

log = logging.getLogger("dagnats_trio.api.run_list")

#: Index entries one page request examines at most (a filtered page may come back short).
LIST_SCAN_ENTRIES_MAX = 5_000
#: Index sequences read per window while a filter leaves out what it reads.
LIST_FILTER_WINDOW_ENTRIES = 500
#: Active markers ``status=running`` reads at most (more running runs than this: an error).
LIST_ACTIVE_MARKERS_MAX = 100_000

INDEX_CURSOR_PREFIX = "i"
ACTIVE_CURSOR_PREFIX = "a"


class BadCursor(ValueError):
    """A cursor that this listing did not hand out."""


@attrs.frozen
class Listed:
    """One page as the reader found it: the snapshots and where the next page starts."""

    runs: tuple[RunSnapshot, ...]
    next_cursor: str | None


def _parse_cursor(cursor: str | None, prefix: str) -> int | None:
    if cursor is None:
        return None
    body = cursor[len(prefix) :]
    if not cursor.startswith(prefix) or not body.isascii() or not body.isdigit():
        raise BadCursor(
            f"cursor {cursor[:40]!r} is not a next_cursor of this listing (filters must stay "
            "the same while paging)"
        )
    return int(body)


def check_cursor(status: RunStatus | None, cursor: str | None) -> None:
    """:class:`BadCursor` for a cursor that is no ``next_cursor`` of this listing, checked
    before anything is read (or, on a first listing, written: the run index)."""
    _parse_cursor(
        cursor, ACTIVE_CURSOR_PREFIX if status is RunStatus.RUNNING else INDEX_CURSOR_PREFIX
    )


async def list_runs_page(
    transport: Transport,
    *,
    workflow: str | None,
    status: RunStatus | None,
    limit: int,
    cursor: str | None,
) -> Listed:
    """One page, newest first; :class:`BadCursor` for a cursor of another listing."""
    if status is RunStatus.RUNNING:
        below = _parse_cursor(cursor, ACTIVE_CURSOR_PREFIX)
        return await _list_running(transport, workflow, limit, below)
    below = _parse_cursor(cursor, INDEX_CURSOR_PREFIX)
    return await _list_indexed(transport, workflow, status, limit, below)


async def _list_indexed(
    transport: Transport,
    workflow: str | None,
    status: RunStatus | None,
    limit: int,
    below: int | None,
) -> Listed:
    if below is None:
        # ">" rather than the stream's one filter: the server answers it from the stream's last
        # sequence, while a wildcard is matched against every run's subject (~7 ms at 100,000).
        last = await transport.get_last_msg(layout.RUN_INDEX_STREAM, ">")
        top = 0 if last is None else last.seq
    else:
        top = below - 1
    filtered = workflow is not None or status is not None
    runs: list[RunSnapshot] = []
    scanned = 0
    while top >= 1 and scanned < LIST_SCAN_ENTRIES_MAX:
        want = limit - len(runs)
        size = min(max(want, LIST_FILTER_WINDOW_ENTRIES) if filtered else want, top)
        size = min(size, LIST_SCAN_ENTRIES_MAX - scanned)
        low = top - size + 1
        entries = await _read_index_window(transport, low, top)
        scanned += size
        candidates = [
            (seq, e)
            for seq, e in sorted(entries.items(), reverse=True)
            if workflow is None or e.workflow == workflow
        ]
        snaps = await _read_snapshots(transport, (e.run_id for _, e in candidates))
        matches = [
            (seq, snap)
            for seq, e in candidates
            if (snap := snaps.get(e.run_id)) is not None
            and (status is None or snap.status is status)
        ]
        for n, (seq, snap) in enumerate(matches):
            runs.append(snap)
            if len(runs) == limit:
                # A cursor only when something may follow: more matches in this window, or
                # sequences below it not read yet (which may turn out empty).
                more = n + 1 < len(matches) or low > 1
                return Listed(tuple(runs), f"{INDEX_CURSOR_PREFIX}{seq}" if more else None)
        top = low - 1
    more = top >= 1
    return Listed(tuple(runs), f"{INDEX_CURSOR_PREFIX}{top + 1}" if more else None)


async def _list_running(
    transport: Transport, workflow: str | None, limit: int, below: int | None
) -> Listed:
    markers = [
        (seq, e)
        for seq, e in sorted((await _read_markers(transport)).items(), reverse=True)
        if (below is None or seq < below) and (workflow is None or e.workflow == workflow)
    ]
    runs: list[RunSnapshot] = []
    while markers:
        chunk, markers = markers[: limit - len(runs)], markers[limit - len(runs) :]
        snaps = await _read_snapshots(transport, (e.run_id for _, e in chunk))
        for seq, e in chunk:
            snap = snaps.get(e.run_id)
            if snap is None:
                continue  # being created (the marker goes first), or being purged
            if snap.status.finished:
                await _repair(transport, e.run_id)
                continue
            runs.append(snap)
            if len(runs) == limit:
                more = bool(markers) or seq != chunk[-1][0]
                return Listed(tuple(runs), f"{ACTIVE_CURSOR_PREFIX}{seq}" if more else None)
    return Listed(tuple(runs), None)


async def _repair(transport: Transport, run_id: str) -> None:
    """Remove the stale marker of a finished run (its removal was interrupted); a failure
    here leaves it for the next listing and does not fail this one."""
    try:
        await drop_active(transport, run_id)
    except TransportError as exc:
        log.warning("run %s: stale active marker not removed (%s)", run_id, exc)


# --- the reads -----------------------------------------------------------------------------------


def _decode_entry(msg: StoredMsg) -> RunIndexEntry | None:
    try:
        return decode_run_index_entry(msg.data)
    except DecodeError:
        log.warning("run index: %s#%d is no index entry; skipped", msg.subject, msg.seq)
        return None


async def _read_index_window(transport: Transport, low: int, high: int) -> dict[int, RunIndexEntry]:
    """The index entries at sequences ``low..high`` (gaps left by purges are simply absent):
    one batch direct get."""
    msgs = await transport.get_batch(layout.RUN_INDEX_STREAM, low, high - low + 1)
    found: dict[int, RunIndexEntry] = {}
    for msg in msgs:
        if msg.seq <= high and (entry := _decode_entry(msg)) is not None:
            found[msg.seq] = entry
    return found


async def _read_markers(transport: Transport) -> dict[int, RunIndexEntry]:
    """Every active marker, by its sequence in ``RUN_ACTIVE``: batch direct gets from its first
    sequence (the server skips markers already removed). No subject filter: the stream holds
    markers and its sentinel only (``transport.provision``), skipped here by its subject, and a
    wildcard filter makes the server match each message's subject."""
    found: dict[int, RunIndexEntry] = {}
    seq = 1
    while True:
        msgs = await transport.get_batch(layout.RUN_ACTIVE_STREAM, seq, MAX_GET_BATCH_MSGS)
        for msg in msgs:
            if msg.subject == _ACTIVE_SENTINEL:
                continue
            if (entry := _decode_entry(msg)) is not None:
                found[msg.seq] = entry
        if len(found) > LIST_ACTIVE_MARKERS_MAX:
            raise RuntimeError(f"more than {LIST_ACTIVE_MARKERS_MAX} runs are marked running")
        if len(msgs) < MAX_GET_BATCH_MSGS:
            return found
        seq = msgs[-1].seq + 1


async def _read_snapshots(transport: Transport, run_ids: Iterable[str]) -> dict[str, RunSnapshot]:
    """The snapshots of ``run_ids`` that exist and decode: one batch direct get per 1,024."""
    entries = await transport.kv_get_many(
        layout.RUNS_BUCKET, [layout.run_key(run_id) for run_id in run_ids]
    )
    found: dict[str, RunSnapshot] = {}
    for key, entry in entries.items():
        if entry.value is None:
            continue
        try:
            snap = decode_snapshot(entry.value)
        except DecodeError:
            log.warning("%s: snapshot unreadable; not listed", key)
            continue
        found[snap.run_id] = snap
    return found
