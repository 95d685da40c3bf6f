"""The chaos soak of the spec's "How it is verified": ``python -m chaos`` (``just chaos``).

Many scripted-agent runs at once, on several engines sharing the history consumer and several
workers, under a schedule of kills and stalls at the crash seams, duplicate and dropped
deliveries, lost publish acks and stream-leader step-downs drawn from one seed (on a cluster
also whole nodes SIGKILLed and restarted, paused past an election timeout, and cut off by a
partition). After every run the answer, ``journal check`` and the unsafe tool's start count
are checked.

On the simulation (the default) the seed fixes the schedule and the ids, and the soak runs as one
Hypothesis example, which makes Trio's scheduling order follow (``run_sim_soak``), so one seed gives
one trace hash. ``--real`` and ``--cluster`` run the same shape of schedule on real
nats-servers.
"""

from dagnats_trio.testing import Fault, FaultKind, Target

from ._backends import (
    RealBackend,
    SimBackend,
    open_real_backend,
    real_backend,
    real_config,
    run_sim_soak,
    sim_backend,
    sim_soak,
)
from ._faults import FaultyTransport, ProxyFaults, ProxyInjector, SimInjector
from ._nodes import NodeFaults, ProxiedCluster, open_proxied_cluster
from ._proxy import TcpProxy
from ._schedule import BASE_KINDS, CLUSTER_KINDS, RunPlan, draw_schedule
from ._seed import FALLBACK_SEED, SEED_ENV, SoakSeed, soak_seed
from ._soak import (
    Backend,
    ChaosKill,
    RunOutcome,
    SoakConfig,
    SoakResult,
    soak,
)
from ._watchdog import WallWatchdog

__all__ = [
    "BASE_KINDS",
    "CLUSTER_KINDS",
    "FALLBACK_SEED",
    "SEED_ENV",
    "Backend",
    "ChaosKill",
    "Fault",
    "FaultKind",
    "FaultyTransport",
    "NodeFaults",
    "ProxiedCluster",
    "ProxyFaults",
    "ProxyInjector",
    "RealBackend",
    "RunOutcome",
    "RunPlan",
    "SimBackend",
    "SimInjector",
    "SoakConfig",
    "SoakResult",
    "SoakSeed",
    "Target",
    "TcpProxy",
    "WallWatchdog",
    "draw_schedule",
    "open_proxied_cluster",
    "open_real_backend",
    "real_backend",
    "real_config",
    "run_sim_soak",
    "sim_backend",
    "sim_soak",
    "soak",
    "soak_seed",
]
