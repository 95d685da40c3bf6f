"""A copy of a frozen attrs value with some fields changed, for the engine's per-event copies.

``attrs.evolve`` reads the class's fields and then each field by name on every call: about
twenty calls for a step's state, made for every step a decision touches and for the run's
snapshot on every event. :func:`replace` reads all fields in one C call (an
``operator.attrgetter`` built once per class) and builds the copy with one ``__init__``, so the
new value is checked exactly as ``evolve``'s is (validators, converters). Pure: no I/O.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

#: Per class: its field names and the getter reading them all (a tuple), or None when the
#: class takes a field that ``__init__`` does not (``init=False``) or under another name
#: (an alias): ``attrs.evolve`` is used for those.
_PLANS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] | None] = {}


def _plan(cls: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]] | None:
    fields = attrs.fields(cls)
    names = tuple(f.name for f in fields)
    if len(names) < 2 or any(not f.init or f.alias != f.name for f in fields):
        return None
    return names, operator.attrgetter(*names)


def replace(inst: T, **changes: Any) -> T:
    """``attrs.evolve(inst, **changes)``, the same value, at a few calls (a name that is not a
    field is the same ``TypeError`` from ``__init__``)."""
    cls = type(inst)
    try:
        plan = _PLANS[cls]
    except KeyError:
        plan = _PLANS[cls] = _plan(cls)
    if plan is None:
        same: T = attrs.evolve(inst, **changes)  # type: ignore[misc]  # an attrs class
        return same
    names, get = plan
    values = dict(zip(names, get(inst), strict=True))
    values.update(changes)
    new: T = cls(**values)
    return new
