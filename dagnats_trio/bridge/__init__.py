"""The HTTP bridge: workers in other languages lease tasks over HTTP, with the same fencing as
the Python SDK (see docs/bridge.md).

``bridge = Bridge(transport, ...)``; ``await nursery.start(bridge.run)``; mount its routes with
``create_app(service, inputs, transport, bridge=bridge)``.
"""

from ._bridge import Bridge
from ._errors import BridgeError
from ._http import BRIDGE_OPERATIONS, Endpoint, bridge_endpoints
from ._lease import Lease
from ._leases import (
    DEFAULT_MAX_LEASES,
    LEASE_KEEP_ACK_WAITS,
    LEASE_LOCK_WAIT_S,
    MAX_POLL_WAIT_S,
    POLL_FETCH_SLICE_S,
    POLL_MIN_FETCH_S,
)
from ._records import APPENDABLE, FILLED_FIELDS, JOURNAL_READ_MAX_RECORDS
from ._views import (
    MAX_UNTIL_MS,
    Appended,
    BridgeJournalEntry,
    CheckpointBody,
    CheckpointSaved,
    CheckpointState,
    ClaimedJournal,
    CompleteBody,
    ContinueBody,
    FailBody,
    HeartbeatView,
    JournalAppendBody,
    LeaseView,
    PauseBody,
    PlacedInputs,
    PlacedInputView,
    PlaceInputsBody,
    Settled,
)

__all__ = [
    "APPENDABLE",
    "BRIDGE_OPERATIONS",
    "DEFAULT_MAX_LEASES",
    "FILLED_FIELDS",
    "JOURNAL_READ_MAX_RECORDS",
    "LEASE_KEEP_ACK_WAITS",
    "LEASE_LOCK_WAIT_S",
    "MAX_POLL_WAIT_S",
    "MAX_UNTIL_MS",
    "POLL_FETCH_SLICE_S",
    "POLL_MIN_FETCH_S",
    "Appended",
    "Bridge",
    "BridgeError",
    "BridgeJournalEntry",
    "CheckpointBody",
    "CheckpointSaved",
    "CheckpointState",
    "ClaimedJournal",
    "CompleteBody",
    "ContinueBody",
    "Endpoint",
    "FailBody",
    "HeartbeatView",
    "JournalAppendBody",
    "Lease",
    "LeaseView",
    "PauseBody",
    "PlaceInputsBody",
    "PlacedInputView",
    "PlacedInputs",
    "Settled",
    "bridge_endpoints",
]
