"""An effect's JSON text, with the message it publishes spelled once.

The engine writes each decision's effects twice: as text in the snapshot's outbox entry (saved
first) and, right after, as the task or event it publishes (``_execute``). Both hold the same
message, the task of a :class:`PublishTask` or the event of a :class:`PublishEvent` (an
:class:`ArmTimer`'s event is stored untagged and published tagged: two texts, left alone). So
the message is spelled once, memoised by the effect's identity (the outbox entry holds the very
effect objects the decision hands to ``execute_effects``), and the effect's text is put
together around it. The bytes are those of the one converter (``to_json(effect, Effect)``: the
effect's fields in class order, the tag last), and the published bytes those of
``encode_task`` / ``encode_event``; tests/engine/test_effect_text.py checks both for every
effect type. A replayed outbox entry is decoded into new objects, whose message is spelled
from the decoded value: what ``encode_task`` made of it before this memo.
"""

from __future__ import annotations

from typing import Any, Final

from ..protocol import DispatchId, InputSubmitted, RunEvent, TaskMessage, converter, dumps_json
from .effects import Effect, PublishEvent, PublishTask

#: Bound on the memo; it is emptied when full (a miss only costs the spelling).
MESSAGE_TEXT_MEMO_MAX_ENTRIES = 4096

#: ``[effect, message text]`` by the effect's identity; the effect is held beside its text, so
#: its ``id`` cannot be reused while the slot lives.
_MESSAGE_TEXT: dict[int, list[Any]] = {}

#: The converter's hooks, looked up once (as ``protocol.encoder_of`` does for ``encode_task``
#: and ``encode_event``: the classes' hooks are fixed at import).
_TASK_HOOK: Final = converter.get_unstructure_hook(TaskMessage)
_EVENT_HOOK: Final = converter.get_unstructure_hook(RunEvent)


def message_text(effect: PublishTask | PublishEvent) -> str:
    """The JSON text of the task or event ``effect`` publishes, spelled once per effect."""
    slot = _MESSAGE_TEXT.get(id(effect))
    if slot is not None and slot[0] is effect:
        text: str = slot[1]
        return text
    if isinstance(effect, PublishTask):
        text = dumps_json(_TASK_HOOK(effect.task))
    else:
        text = dumps_json(_EVENT_HOOK(effect.event))
    if len(_MESSAGE_TEXT) >= MESSAGE_TEXT_MEMO_MAX_ENTRIES:
        _MESSAGE_TEXT.clear()
    _MESSAGE_TEXT[id(effect)] = [effect, text]
    return text


def message_bytes(effect: PublishTask | PublishEvent) -> bytes:
    """What ``effect`` publishes: ``encode_task(effect.task)`` or ``encode_event(effect.event)``
    (the same bytes), from the text its outbox entry was spelled with."""
    return message_text(effect).encode()


def effect_text(effect: Effect) -> str:
    """``dumps_json(converter.unstructure(effect, Effect))``, with a message spelled by
    :func:`message_text`: the fields in class order, then the tag (checked below)."""
    if isinstance(effect, PublishTask):
        return (
            f'{{"task":{message_text(effect)},"msg_id":{dumps_json(effect.msg_id)},'
            f'"type":"{PublishTask.TYPE}"}}'
        )
    if isinstance(effect, PublishEvent):
        return (
            f'{{"run_id":{dumps_json(effect.run_id)},"event":{message_text(effect)},'
            f'"msg_id":{dumps_json(effect.msg_id)},"type":"{PublishEvent.TYPE}"}}'
        )
    return dumps_json(converter.unstructure(effect, Effect))


def _keys(effect: Effect) -> list[str]:
    return list(converter.unstructure(effect, Effect))


_SAMPLE_TASK = TaskMessage("r", "s", "t", "w", DispatchId(0, 1, "n"))
if _keys(PublishTask(_SAMPLE_TASK, "m")) != ["task", "msg_id", "type"] or _keys(
    PublishEvent("r", InputSubmitted("r", "s"), "m")
) != ["run_id", "event", "msg_id", "type"]:
    raise RuntimeError("effect_text spells an effect's fields in class order, then its tag")
