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
only, so moving them onto the transport's batch direct get changes these three functions.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable

import attrs

from .._concurrency import run_all
from ..engine import RunSnapshot, decode_snapshot, drop_active
from ..protocol import DecodeError, RunIndexEntry, RunStatus, decode_run_index_entry, layout
from ..transport import NotFound, StoredMsg, Transport

log = logging.getLogger("dagnats_trio.api.run_list")

#: Index entries one page request examines at most (a filtered page may come back short).
LIST_SCAN_ENTRIES_MAX = 5_000
#: Index sequences read per window while a filter leaves out what it reads.
LIST_FILTER_WINDOW_ENTRIES = 500
#: Reads in flight at once for one page (index messages, snapshots).
LIST_READS_CONCURRENT_MAX = 64
#: Active markers ``status=running`` reads at most (more running runs than this: an error).
LIST_ACTIVE_MARKERS_MAX = 100_000
#: Parts of the active markers' sequence span read at once.
LIST_MARKER_SPANS = 32

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
        last = await transport.get_last_msg(layout.RUN_INDEX_STREAM, layout.RUN_INDEX_FILTER)
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
                await drop_active(transport, e.run_id)  # stale: its removal was interrupted
                continue
            runs.append(snap)
            if len(runs) == limit:
                more = bool(markers) or seq != chunk[-1][0]
                return Listed(tuple(runs), f"{ACTIVE_CURSOR_PREFIX}{seq}" if more else None)
    return Listed(tuple(runs), None)


# --- the reads -----------------------------------------------------------------------------------


def _decode_entry(msg: StoredMsg) -> RunIndexEntry | None:
    try:
        return decode_run_index_entry(msg.data)
    except DecodeError:
        log.warning("run index: %s#%d is no index entry; skipped", msg.subject, msg.seq)
        return None


async def _read_index_window(transport: Transport, low: int, high: int) -> dict[int, RunIndexEntry]:
    """The index entries at sequences ``low..high`` (gaps left by purges are simply absent)."""
    found: dict[int, RunIndexEntry] = {}

    async def read(seq: int) -> None:
        try:
            msg = await transport.get_msg(layout.RUN_INDEX_STREAM, seq)
        except NotFound:
            return
        entry = _decode_entry(msg)
        if entry is not None:
            found[seq] = entry

    await run_all(
        [functools.partial(read, seq) for seq in range(low, high + 1)],
        in_flight_max=LIST_READS_CONCURRENT_MAX,
    )
    return found


async def _read_markers(transport: Transport) -> dict[int, RunIndexEntry]:
    """Every active marker, by its sequence in ``RUN_ACTIVE``.

    Markers are spread over the stream's sequences (most runs finished and took theirs away),
    and a message get finds the next one from a sequence on the server; the span from the first
    marker to the last is cut into :data:`LIST_MARKER_SPANS` parts read at once.
    """
    stream, subject = layout.RUN_ACTIVE_STREAM, layout.RUN_ACTIVE_FILTER
    last = await transport.get_last_msg(stream, subject)
    first = await transport.read_subject(stream, subject, 1, 1)
    if last is None or not first:
        return {}
    low, high = first[0].seq, last.seq
    step = max(1, -(-(high - low + 1) // LIST_MARKER_SPANS))
    msgs: list[StoredMsg] = []

    async def span(start: int) -> None:
        seq, end = start, min(start + step - 1, high)
        while seq <= end:
            found = await transport.read_subject(stream, subject, seq, 1)
            if not found or found[0].seq > end:
                return
            msgs.append(found[0])
            if len(msgs) > LIST_ACTIVE_MARKERS_MAX:
                raise RuntimeError(f"more than {LIST_ACTIVE_MARKERS_MAX} runs are marked running")
            seq = found[0].seq + 1

    await run_all(
        [functools.partial(span, start) for start in range(low, high + 1, step)],
        in_flight_max=LIST_MARKER_SPANS,
    )
    found: dict[int, RunIndexEntry] = {}
    for msg in msgs:
        entry = _decode_entry(msg)
        if entry is not None:
            found[msg.seq] = entry
    return found


async def _read_snapshots(transport: Transport, run_ids: Iterable[str]) -> dict[str, RunSnapshot]:
    """The snapshots of ``run_ids`` that exist and decode, read together."""
    found: dict[str, RunSnapshot] = {}

    async def read(run_id: str) -> None:
        entry = await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run_id))
        if entry is None or entry.value is None:
            return
        try:
            found[run_id] = decode_snapshot(entry.value)
        except DecodeError:
            log.warning("run %s: snapshot unreadable; not listed", run_id)

    await run_all(
        [functools.partial(read, run_id) for run_id in dict.fromkeys(run_ids)],
        in_flight_max=LIST_READS_CONCURRENT_MAX,
    )
    return found
