"""Journal open and read as the journal grows (issue 12 item 5): 1,000 vs 10,000 records.

A step's journal is filled with whole iterations (claim, model record, continue commit), then:

- **open**: ``open_journal`` for the next iteration, the task naming the last commit (the fast
  path: the tail is that commit, one tail read and one claim), timed ``OPENS`` times, each
  iteration committed (not timed) before the next is opened;
- **reopen**: a redelivery of an iteration in progress (its claim and a model record stored):
  the tail is not the base commit, so the iteration's records are read from ``journal_seq`` and
  the replay view is built, then the claim;
- **read**: every record of the journal, page by page (``read_journal``: a batch direct get per
  page of ``READ_PAGE_RECORDS``), with the requests it took.

Opening costs what the iteration holds, not what the journal holds: the ratio of the medians at
10,000 and 1,000 records is printed (goal: within 1.2x). Default store (no fsync): the claim's
fsync would be the same at both sizes.
"""

from __future__ import annotations

import statistics
import time

import trio

from dagnats_trio.journal import READ_PAGE_RECORDS, open_journal, read_journal
from dagnats_trio.protocol import (
    ClaimRecord,
    CommitAction,
    CommitRecord,
    DispatchId,
    ModelRecord,
    TaskMessage,
    encode_record,
    record_headers,
)
from dagnats_trio.protocol.layout import journal_subject
from dagnats_trio.server import open_nats_server
from dagnats_trio.transport import (
    MAX_BATCH_PUBLISH_MSGS,
    BatchMsg,
    Transport,
    open_nats_transport,
    provision,
)

SIZES = (1_000, 10_000)
OPENS = 40
OPENS_QUICK = 12
#: Records per filled iteration: claim, model record, continue commit.
RECORDS_PER_ITERATION = 3
STEP = "agent"
#: Goal of issue 12 item 5: open at 10,000 records within this factor of open at 1,000.
FLAT_RATIO_GOAL = 1.2


def _task(run_id: str, iteration: int, journal_seq: int | None) -> TaskMessage:
    return TaskMessage(
        run_id=run_id,
        step_id=STEP,
        task="bench-journal",
        workflow="bench-journal",
        dispatch=DispatchId(iteration, 1, f"n{run_id}-{iteration}"),
        input=None,
        journal_seq=journal_seq,
        is_loop=True,
    )


async def _fill(tp: Transport, run_id: str, records: int) -> tuple[int, int]:
    """Whole iterations up to ``records`` records; returns (iterations, last commit's seq)."""
    subject = journal_subject(run_id, STEP)
    msgs: list[BatchMsg] = []
    iterations = records // RECORDS_PER_ITERATION
    for i in range(iterations):
        claim, nonce = f"c{i}", f"n{run_id}-{i}"
        for rec in (
            ClaimRecord(i, 1, claim, nonce),
            ModelRecord(i, 1, claim, 0, {"turn": i, "text": "x" * 64}),
            CommitRecord(i, 1, claim, nonce, CommitAction.CONTINUE, state={"turn": i}),
        ):
            msgs.append(BatchMsg(subject, encode_record(rec), headers=record_headers(rec)))
    last = 0
    for at in range(0, len(msgs), MAX_BATCH_PUBLISH_MSGS):
        ack = await tp.publish_batch(msgs[at : at + MAX_BATCH_PUBLISH_MSGS])
        last = ack.last_seq
    return iterations, last


async def _open_once(tp: Transport, run_id: str, at: list[int]) -> tuple[float, float]:
    """Open the next iteration (timed), record a model response, open it again as a redelivery
    (timed), commit it (not timed); ``at`` is (iteration, journal_seq), moved on."""
    task = _task(run_id, at[0], at[1])
    started = time.perf_counter()
    j = await open_journal(tp, task)
    open_ms = (time.perf_counter() - started) * 1000
    await j.model(lambda: {"turn": "new"})
    started = time.perf_counter()
    j2 = await open_journal(tp, task)
    reopen_ms = (time.perf_counter() - started) * 1000
    at[1] = await j2.settle(CommitAction.CONTINUE)
    at[0] += 1
    return open_ms, reopen_ms


async def _read_all(tp: Transport, run_id: str) -> dict[str, float]:
    before = tp.round_trips
    started = time.perf_counter()
    entries = await read_journal(tp, run_id, STEP)
    return {
        "read_ms": (time.perf_counter() - started) * 1000,
        "read_records": len(entries),
        "read_requests": tp.round_trips - before,
    }


async def _measure(opens: int) -> dict[int, dict[str, float]]:
    """Both journals filled first, then opened in turn (1,000, 10,000, 1,000, ...), so load on
    the machine and the stream's size weigh on both alike."""
    async with (
        open_nats_server(sync_always=False) as server,
        open_nats_transport(server.url, name="bench-journal") as tp,
    ):
        await provision(tp)
        runs = {n: f"jo{n}x{time.monotonic_ns()}" for n in SIZES}
        at = {n: list(await _fill(tp, runs[n], n)) for n in SIZES}
        times: dict[int, list[tuple[float, float]]] = {n: [] for n in SIZES}
        for round_ in range(opens + 2):
            for n in SIZES:
                sample = await _open_once(tp, runs[n], at[n])
                if round_ >= 2:  # the first two rounds warm up
                    times[n].append(sample)
        out: dict[int, dict[str, float]] = {}
        for n in SIZES:
            out[n] = {
                "open_ms": statistics.median(o for o, _ in times[n]),
                "reopen_ms": statistics.median(r for _, r in times[n]),
                **await _read_all(tp, runs[n]),
            }
        return out


def run(*, quick: bool = False) -> dict[str, float]:
    opens = OPENS_QUICK if quick else OPENS
    small, large = SIZES
    print(f"== journal_open: open (claim + replay view) and read a journal of {small:,} vs "
          f"{large:,} records; median of {opens} opens each")  # fmt: skip
    by_size = trio.run(_measure, opens)
    for n, f in by_size.items():
        print(f"  {n:>6,} records: open {f['open_ms']:.2f} ms (fast path: tail + claim), "
              f"reopen {f['reopen_ms']:.2f} ms (redelivery: the iteration's records read and "
              f"replayed); read all {int(f['read_records']):,} in {f['read_ms']:.1f} ms, "
              f"{int(f['read_requests'])} requests (pages of {READ_PAGE_RECORDS})")  # fmt: skip
    open_ratio = by_size[large]["open_ms"] / by_size[small]["open_ms"]
    reopen_ratio = by_size[large]["reopen_ms"] / by_size[small]["reopen_ms"]
    print(f"  ratio {large:,} / {small:,}: open {open_ratio:.2f}x, reopen {reopen_ratio:.2f}x "
          f"(goal: within {FLAT_RATIO_GOAL}x)")  # fmt: skip
    return {
        "journal_open_ratio": round(open_ratio, 2),
        "journal_reopen_ratio": round(reopen_ratio, 2),
        "journal_open_ms_10k": round(by_size[large]["open_ms"], 2),
        "journal_read_ms_10k": round(by_size[large]["read_ms"], 1),
        "journal_read_requests_10k": by_size[large]["read_requests"],
    }


if __name__ == "__main__":
    run()
