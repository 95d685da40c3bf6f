"""The size bounds of the NATS wire protocol that the sans-IO core enforces.

The server's own bound on a message is the ``max_payload`` of its INFO; until an INFO arrives the
core assumes the server default. Control lines and header blocks have fixed bounds here, so a
peer that never sends CRLF cannot make the parser buffer without end.
"""

from __future__ import annotations

#: Longest control line (op and arguments, without CRLF) accepted or sent; nats-server's default.
MAX_CONTROL_LINE_BYTES = 4096
#: Payload bound before the server's INFO says otherwise (nats-server's default, 1 MiB).
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
#: Largest header block (``NATS/1.0`` line through the blank line) accepted or sent.
MAX_HEADER_BYTES = 64 * 1024
#: How far over ``max_payload`` a message FROM the server may go (``MSG``/``HMSG``), as a
#: factor of it, plus :data:`MAX_HEADER_BYTES`. The server bounds what clients publish, not
#: what it hands out: a stored message comes back with headers it adds (a direct get's
#: ``Nats-Stream``, ``Nats-Sequence``...), or base64-encoded (4/3 of its bytes) inside the JSON of
#: a ``STREAM.MSG.GET`` answer. Refusing those dropped the connection on every read of a message
#: published near the bound. Twice the payload still bounds what one delivery may make the
#: parser hold.
DELIVERY_MAX_PAYLOAD_FACTOR = 2
#: Longest INFO or CONNECT JSON accepted (they travel on the control line but may be long).
MAX_JSON_LINE_BYTES = 64 * 1024
