"""Issue 12 goals 1 and 3: the engine's compare-and-sets name the run's definition by reference
(stored once, by its content, in ``workflow_defs``) instead of carrying it on every save.

With ``sync_interval: always`` a save costs ~30 us more per KB (all of it in the fsync), and each
save is delivered to every watcher of the runs bucket; the scripted agent's definition was
~370 of a save's ~1,100 bytes, on each of its five saves. A reader resolves the reference once
per definition and process; a definition registered again under its name is another
reference, so a run keeps the one it started with, through a cold engine too.
"""

from __future__ import annotations

import cProfile
import functools
import json
from collections.abc import Callable
from typing import Any, Final, cast

import pytest
import trio
from hypothesis import given

from dagnats_trio.api import Service
from dagnats_trio.dag import WorkflowDef
from dagnats_trio.engine import (
    DefinitionRefs,
    RunSnapshot,
    SnapshotEncoder,
    decode_snapshot,
    definition_ref,
    encode_snapshot,
)
from dagnats_trio.engine._replace import replace
from dagnats_trio.engine.snapshot import definition_bytes
from dagnats_trio.protocol import (
    DecodeError,
    LifecycleEvent,
    RunStatus,
    StepContinue,
    TaskMessage,
    layout,
    to_json,
)
from dagnats_trio.testing import agent_workflow
from dagnats_trio.transport import NatsTransport, Transport

from ._fakes import RUN_TIMEOUT_S, FakeWorker, complete_with, running, test_engine, uid
from .test_snapshot_codec import EARLIER_RELEASE_SNAPSHOT, SNAPSHOT_EXAMPLES, _snapshots


@pytest.fixture(params=["own_nats", "sim"])
def transport(request: pytest.FixtureRequest) -> Transport:
    """The suite's ``transport``, with the real server one of the test's own: a test here counts
    what the engine derives, which on the session server would include the starts earlier tests
    left on the engine's durable consumer."""
    value: Transport = request.getfixturevalue(f"{request.param}_transport")
    return value

#: The scripted agent's iterations (4 model calls, 3 tool calls: three continues, an answer):
#: five compare-and-sets, as in ``just bench``.
AGENT_ITERATIONS: Final = 4
#: Bytes of each of those saves: 1,029 to 1,167 while every save carried the definition
#: (~370 bytes of it, with its key); 742 to 880 since it names it by reference (84 bytes).
MAX_SNAPSHOT_BYTES_PER_CAS: Final = 950
#: Calls (profiled) to encode one save of the scripted agent's snapshot (the bench's definition;
#: its first save, ``EARLIER_RELEASE_SNAPSHOT``), memoised parts warm: 45 with the definition
#: spliced in inline (the run's fields before it and after it encoded apart); 38 by reference
#: (the reference one value among the run's fields: one encoding). And to decode it: 102 and 68.
MAX_CALLS_PER_SAVE_ENCODE: Final = 40
MAX_CALLS_PER_SAVE_DECODE: Final = 75
#: Calls (profiled) to decode the agent's finished snapshot as the engine stores it (what
#: ``Service.get_run`` and ``RunWatch`` decode when a run ends): 114 with the definition inline
#: (its steps, retry policy and loop bounds structured on every decode); 79 by reference.
MAX_CALLS_PER_FINISHED_DECODE: Final = 90


class SavedSnapshots:
    """The engine's transport, noting each snapshot it saves with compare-and-set and each key
    it reads."""

    def __init__(self, inner: Transport) -> None:
        self._inner = inner
        self.saved: list[tuple[str, bytes]] = []
        self.gets: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def kv_get(self, bucket: str, key: str) -> Any:
        self.gets.append((bucket, key))
        return await self._inner.kv_get(bucket, key)

    async def kv_update(
        self, bucket: str, key: str, value: bytes, revision: int, *, ttl_s: float | None = None
    ) -> int:
        # Noted before the answer (the run's last save may end the test before it comes back).
        if bucket == layout.RUNS_BUCKET:
            self.saved.append((key, value))
        return await self._inner.kv_update(bucket, key, value, revision, ttl_s=ttl_s)


async def _agent_script(t: TaskMessage) -> LifecycleEvent:
    if t.dispatch.iteration < AGENT_ITERATIONS - 1:
        return StepContinue(t.run_id, t.step_id, t.dispatch, journal_seq=t.dispatch.iteration)
    return await complete_with(t, {"answer": 42})


def _calls(fn: Callable[[], object]) -> int:
    fn()  # warm: the converter's functions are made once, the memoised texts spelled
    profile = cProfile.Profile()
    profile.enable()
    fn()
    profile.disable()
    return sum(int(row[1]) for row in profile.getstats())  # type: ignore[attr-defined]


def _calls_to_decode(data: bytes) -> int:
    return _calls(lambda: decode_snapshot(data))


def test_a_save_by_reference_costs_fewer_calls_and_bytes() -> None:
    snap = decode_snapshot(EARLIER_RELEASE_SNAPSHOT)
    assert snap.definition is not None
    inline, by_ref = encode_snapshot(snap), encode_snapshot(snap, definition_by_ref=True)
    encoder = SnapshotEncoder()  # an engine's: warm after the first save
    calls = [
        _calls(functools.partial(encoder.encode, snap, definition_by_ref=by))
        for by in (False, True)
    ]
    decodes = [_calls_to_decode(data) for data in (inline, by_ref)]
    print(
        f"one save of the bench's agent: {len(inline)} -> {len(by_ref)} bytes, "
        f"{calls[0]} -> {calls[1]} calls to encode, {decodes[0]} -> {decodes[1]} to decode"
    )
    assert calls[1] <= MAX_CALLS_PER_SAVE_ENCODE < calls[0]
    assert decodes[1] <= MAX_CALLS_PER_SAVE_DECODE < decodes[0]
    assert len(inline) - len(by_ref) >= len(definition_bytes(snap.definition)) - 100


@SNAPSHOT_EXAMPLES
@given(snap=_snapshots)
def test_a_save_by_reference_is_the_converters_bytes_of_the_reference(snap: RunSnapshot) -> None:
    """By reference, the bytes are the one converter's of the snapshot with its reference in
    the definition's place (field order kept), and decode to it."""
    data = encode_snapshot(snap, definition_by_ref=True)
    named = snap  # no definition: nothing to name
    if snap.definition is not None:
        named = replace(snap, definition=None, definition_ref=definition_ref(snap.definition))
    assert data == to_json(named)
    assert decode_snapshot(data) == named


async def test_each_save_names_the_definition_by_reference(
    nats_transport: NatsTransport,
) -> None:
    service = Service(nats_transport)
    task, wf = uid("agent"), uid("ref")
    registered = await service.register_workflow(agent_workflow(wf, task=task))
    engine_tp = SavedSnapshots(nats_transport)
    engine = test_engine(cast(Transport, engine_tp))
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(engine, FakeWorker(nats_transport, task, _agent_script)):
            run = await service.start_run(wf, {"prompt": "p"})
            done = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert done.status is RunStatus.COMPLETED and done.output == {"answer": 42}
    # What the service returns holds the definition the run started with, resolved.
    assert done.definition == registered
    ref = definition_ref(registered)
    assert done.definition_ref == ref
    # The server is shared: the engine may also apply events other tests left behind.
    ours = [data for key, data in engine_tp.saved if key == layout.run_key(run)]
    sizes = [len(data) for data in ours]
    resolved = [await service.with_definition(decode_snapshot(d)) for d in ours]
    # The same saves as they were written before: the definition inline, no reference.
    inline = [len(encode_snapshot(replace(s, definition_ref=None))) for s in resolved]
    calls_ref, calls_inline = _calls_to_decode(ours[-1]), _calls_to_decode(encode_snapshot(done))
    print(
        f"snapshot bytes per compare-and-set: {sizes} (inline definition: {inline}); "
        f"calls per finished decode: {calls_ref} (inline: {calls_inline})"
    )
    assert len(ours) == AGENT_ITERATIONS + 1
    for data in ours:
        body = json.loads(data)
        assert "definition" not in body and body["definition_ref"] == ref
    assert max(sizes) <= MAX_SNAPSHOT_BYTES_PER_CAS
    # Each save is the definition lighter, but for the reference.
    saved_bytes = len(b',"definition":' + definition_bytes(registered)) - len(
        f',"definition_ref":"{ref}"'
    )
    assert [i - s for s, i in zip(sizes, inline, strict=True)] == [saved_bytes] * len(sizes)
    assert calls_ref <= MAX_CALLS_PER_FINISHED_DECODE < calls_inline
    # The definition is stored once, under its content address, as the bytes a snapshot held.
    entry = await nats_transport.kv_get(layout.DEFS_BUCKET, layout.definition_ref_key(ref))
    assert entry is not None and entry.value == definition_bytes(registered)
    # ... which is no workflow of its own.
    assert [d.name for d in await service.list_workflows() if d.name == wf] == [wf]
    assert all(not d.name.startswith(layout.DEFINITION_REF_PREFIX) for d in
               await service.list_workflows())  # fmt: skip


async def test_a_cold_engine_runs_the_definition_a_run_started_with(transport: Transport) -> None:
    """A takeover: the engine that saved the run is gone, the definition was registered again
    (another step, another loop bound); a new engine reads the run's snapshot, resolves its
    reference, and finishes the run by the definition it started with."""
    service = Service(transport)
    task, wf = uid("loop"), uid("takeover")
    first = await service.register_workflow(
        {
            "name": wf,
            "steps": [
                {"id": "a", "task": task, "type": "agent_loop", "agent_loop": {"max_iterations": 3}}
            ],
        }
    )
    second_iteration = trio.Event()
    release = trio.Event()

    async def script(t: TaskMessage) -> LifecycleEvent:
        if t.dispatch.iteration == 0:
            return StepContinue(t.run_id, t.step_id, t.dispatch, journal_seq=0)
        second_iteration.set()
        await release.wait()
        return await complete_with(t, f"{t.step_id}:{t.dispatch.iteration}")

    worker = FakeWorker(transport, task, script)
    cold_tp = SavedSnapshots(transport)
    with trio.fail_after(RUN_TIMEOUT_S):
        async with running(worker):
            async with running(test_engine(transport)):
                run = await service.start_run(wf, "x")
                await second_iteration.wait()  # the continue is saved: the snapshot names it
            stored = await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run))
            assert stored is not None and stored.value is not None
            assert decode_snapshot(stored.value).definition is None
            await service.register_workflow({"name": wf, "steps": [{"id": "b", "task": task}]})
            async with running(test_engine(cast(Transport, cold_tp))):
                release.set()
                done = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert done.status is RunStatus.COMPLETED and done.output == "a:1"
    assert set(done.steps) == {"a"} and done.steps["a"].iterations == 2
    assert done.definition == first
    assert [t.step_id for t in worker.seen] == ["a", "a"]
    ref_key = layout.definition_ref_key(definition_ref(first))
    defs_read = [key for bucket, key in cold_tp.gets if bucket == layout.DEFS_BUCKET]
    assert ref_key in defs_read and wf not in defs_read


async def test_a_snapshot_holding_its_definition_runs_on_and_is_saved_by_reference(
    transport: Transport,
) -> None:
    """A snapshot with the definition inline (the service's first one, as every snapshot of an
    earlier release), read from the store by an engine that did not derive it: the run goes on,
    and the engine's saves from then on name the definition by reference."""
    service = Service(transport)
    task, wf = uid("t"), uid("inline")
    first = await service.register_workflow({"name": wf, "steps": [{"id": "a", "task": task}]})
    run = await service.start_run(wf, "x")  # no engine yet: the event waits
    # Registered again: the engine cannot derive the first snapshot, it reads the stored one.
    await service.register_workflow({"name": wf, "steps": [{"id": "b", "task": task}]})
    stored = await transport.kv_get(layout.RUNS_BUCKET, layout.run_key(run))
    assert stored is not None and stored.value is not None
    assert decode_snapshot(stored.value).definition == first
    engine_tp = SavedSnapshots(transport)

    async def echo(t: TaskMessage) -> LifecycleEvent:
        return await complete_with(t, f"{t.step_id}:{t.input}")

    with trio.fail_after(RUN_TIMEOUT_S):
        engine = test_engine(cast(Transport, engine_tp))
        async with running(engine, FakeWorker(transport, task, echo)):
            done = await service.wait_for_run(run, RUN_TIMEOUT_S)
    assert done.status is RunStatus.COMPLETED and done.output == "a:x"
    assert done.definition == first and engine.stats.derived == 0
    ours = [json.loads(d) for key, d in engine_tp.saved if key == layout.run_key(run)]
    assert len(ours) == 2  # the start, the completion
    assert all("definition" not in b and b["definition_ref"] == definition_ref(first) for b in ours)


def _snapshot_naming(definition: WorkflowDef) -> RunSnapshot:
    snap = RunSnapshot("r1", RunStatus.RUNNING, "wf", definition=definition, started=True)
    return decode_snapshot(encode_snapshot(snap, definition_by_ref=True))


async def test_a_reference_is_read_once_and_checked(transport: Transport) -> None:
    definition = WorkflowDef.from_json(agent_workflow(uid("once")))
    named = _snapshot_naming(definition)
    assert named.definition is None and named.definition_ref == definition_ref(definition)
    # Encoded again as it is, it still names the reference.
    assert json.loads(encode_snapshot(named))["definition_ref"] == named.definition_ref
    reader = SavedSnapshots(transport)
    refs = DefinitionRefs(cast(Transport, reader))
    with pytest.raises(DecodeError, match="is not stored"):
        await refs.resolve(named)
    await DefinitionRefs(transport).store(definition)
    for _ in range(3):
        assert (await refs.resolve(named)).definition == definition
    assert (
        reader.gets.count((layout.DEFS_BUCKET, layout.definition_ref_key(named.definition_ref)))
        == 2
    )
    # A snapshot holding its definition is returned as it is.
    inline = RunSnapshot("r2", RunStatus.RUNNING, "wf", definition=definition)
    assert await refs.resolve(inline) is inline


async def test_a_reference_that_names_other_bytes_is_refused(transport: Transport) -> None:
    definition = WorkflowDef.from_json(agent_workflow(uid("tampered")))
    named = _snapshot_naming(definition)
    assert named.definition_ref is not None
    other = definition_bytes(WorkflowDef.from_json(agent_workflow(uid("other"))))
    await transport.kv_put(
        layout.DEFS_BUCKET, layout.definition_ref_key(named.definition_ref), other
    )
    with pytest.raises(DecodeError, match="is not it"):
        await DefinitionRefs(transport).resolve(named)
    for bad in ("../x", "ref.>", "A" * 64):
        odd = RunSnapshot("r3", RunStatus.RUNNING, "wf", definition_ref=bad)
        with pytest.raises(DecodeError, match="is no reference"):
            await DefinitionRefs(transport).resolve(odd)
