"""A record with unknown fields is refused in a bounded message, as the REST 400s are.

Found from outside: ``journal/append`` with a record of thousands of unknown keys answered a
400 quoting every one of them (the REST routes list at most ``UNKNOWN_FIELDS_LISTED_MAX``).
"""

from __future__ import annotations

import pytest

from dagnats_trio.bridge._errors import BridgeError
from dagnats_trio.bridge._records import decode_append
from dagnats_trio.web.body import UNKNOWN_FIELDS_LISTED_MAX

#: Unknown keys sent: far more than are listed.
UNKNOWN_KEYS = 5000
#: Bound on the message of the refusal (its listed names and the allowed ones).
MESSAGE_MAX_CHARS = 1000


def test_many_unknown_fields_are_refused_in_a_bounded_message() -> None:
    raw = {"type": "model", "call": 0, **{f"field_{i:05d}": 0 for i in range(UNKNOWN_KEYS)}}
    with pytest.raises(BridgeError) as caught:
        decode_append(raw)  # type: ignore[arg-type]
    message = str(caught.value)
    assert caught.value.status == 400 and caught.value.code == "invalid_record"
    assert len(message) < MESSAGE_MAX_CHARS, len(message)
    assert "field_00000" in message
    assert f"field_{UNKNOWN_FIELDS_LISTED_MAX:05d}" not in message  # the first one not listed
    assert f"{UNKNOWN_KEYS - UNKNOWN_FIELDS_LISTED_MAX} more" in message, message


def test_a_few_unknown_fields_are_all_named() -> None:
    with pytest.raises(BridgeError) as caught:
        decode_append({"type": "model", "call": 0, "colour": 1, "size": 2})
    assert "colour, size" in str(caught.value)
