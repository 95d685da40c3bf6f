"""Transition shim: the layout's names moved to :mod:`dagnats_trio.protocol.layout` (pure) and
provisioning to :mod:`dagnats_trio.transport` (``STREAMS``, ``BUCKETS``, ``provision``)."""

from __future__ import annotations

from dagnats_trio.protocol.layout import *  # noqa: F403
from dagnats_trio.protocol.layout import __all__ as _names

from ._provision import BUCKETS, STREAMS, provision

__all__ = [*_names, "BUCKETS", "STREAMS", "provision"]
