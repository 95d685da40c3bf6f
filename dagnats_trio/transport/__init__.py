"""NATS access: the :class:`Transport` interface, two real implementations (the native Trio
client, the default, and nats-py) and a simulated one.

The real ones load on first use (``dagnats_trio._lazy``): importing the interface does not
pull in nats-py and trio-asyncio.
"""

from typing import TYPE_CHECKING

from .._defaults import CLIENT_ENV, CLIENTS, DEFAULT_CLIENT, Client, parse_client
from .._lazy import lazy_exports
from ._errors import (
    Closed,
    KeyExists,
    NotFound,
    NotProvisioned,
    RevisionMismatch,
    TemporarilyUnavailable,
    TransportError,
    TransportTimeout,
    WrongLastSequence,
)
from ._feed import fetch_feed
from ._fetch_puller import fetch_puller
from ._interface import Delivery, Feed, Puller, Transport
from ._open import open_nats_transport
from ._provision import BUCKETS, STREAMS, provision
from ._retry import (
    TRANSIENT_BACKOFF_MAX_S,
    TRANSIENT_BACKOFF_START_S,
    TRANSIENT_RETRY_DEADLINE_S,
    TransientRetry,
    retry_transient,
)
from ._sim import SimTransport, open_sim_transport
from ._sim_delivery import SimDelivery
from ._sim_faults import SimFaults
from ._sim_server import SimServer
from ._values import (
    DEFAULT_MAX_ACK_PENDING,
    DEFAULT_REQUEST_TIMEOUT_S,
    MAX_BATCH_PUBLISH_MSGS,
    MAX_GET_BATCH_MSGS,
    MAX_LAST_MSGS_SUBJECTS,
    BatchAck,
    BatchMsg,
    BucketSpec,
    ConsumerConfig,
    CoreMsg,
    Headers,
    KvEntry,
    PublishMsg,
    StoredMsg,
    StreamSpec,
    SubjectPurge,
)

if TYPE_CHECKING:
    from ._nats import NatsTransport
    from ._nats_connect import open_nats_py_transport
    from ._nats_pull import NatsDelivery
    from ._trio_nats import TrioNatsTransport
    from ._trio_nats_connect import open_trio_nats_transport
    from ._trio_nats_msgs import TrioNatsDelivery
else:
    # mypy sees the imports above instead, so a misspelt name is an error, not ``object``.
    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "._nats": ("NatsTransport",),
            "._nats_pull": ("NatsDelivery",),
            "._nats_connect": ("open_nats_py_transport",),
            "._trio_nats": ("TrioNatsTransport",),
            "._trio_nats_connect": ("open_trio_nats_transport",),
            "._trio_nats_msgs": ("TrioNatsDelivery",),
        },
    )

__all__ = [
    "BUCKETS",
    "CLIENTS",
    "CLIENT_ENV",
    "DEFAULT_CLIENT",
    "DEFAULT_MAX_ACK_PENDING",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "MAX_BATCH_PUBLISH_MSGS",
    "MAX_GET_BATCH_MSGS",
    "MAX_LAST_MSGS_SUBJECTS",
    "STREAMS",
    "TRANSIENT_BACKOFF_MAX_S",
    "TRANSIENT_BACKOFF_START_S",
    "TRANSIENT_RETRY_DEADLINE_S",
    "BatchAck",
    "BatchMsg",
    "BucketSpec",
    "Client",
    "Closed",
    "ConsumerConfig",
    "CoreMsg",
    "Delivery",
    "Feed",
    "Headers",
    "KeyExists",
    "KvEntry",
    "NatsDelivery",
    "NatsTransport",
    "NotFound",
    "NotProvisioned",
    "PublishMsg",
    "Puller",
    "RevisionMismatch",
    "SimDelivery",
    "SimFaults",
    "SimServer",
    "SimTransport",
    "StoredMsg",
    "StreamSpec",
    "SubjectPurge",
    "TemporarilyUnavailable",
    "TransientRetry",
    "Transport",
    "TransportError",
    "TransportTimeout",
    "TrioNatsDelivery",
    "TrioNatsTransport",
    "WrongLastSequence",
    "fetch_feed",
    "fetch_puller",
    "open_nats_py_transport",
    "open_nats_transport",
    "open_sim_transport",
    "open_trio_nats_transport",
    "parse_client",
    "provision",
    "retry_transient",
]
