"""A copy of a frozen attrs value with some fields changed, for the engine's per-event copies.

``attrs.evolve`` reads the class's fields and then each field by name on every call: about
twenty calls for a step's state, made for every step a decision touches and for the run's
snapshot on every event. :func:`replace` reads all fields of those two classes in one C call
(an ``operator.attrgetter`` built at import: the table is fixed and read-only, not a cache
filled as classes come) and builds the copy with one ``__init__``, so the new value is checked
exactly as ``evolve``'s is (validators, converters). Any other class goes through
``attrs.evolve``. Pure: no I/O.
"""

from __future__ import annotations

import operator
import types
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar

import attrs

from .snapshot import RunSnapshot, StepState

T = TypeVar("T")

#: A class's field names and the getter reading them all (a tuple).
_Plan = tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]


def _plan(cls: type) -> _Plan | None:
    """None when the class takes a field that ``__init__`` does not (``init=False``) or under
    another name (an alias): ``attrs.evolve`` is used for those."""
    fields = attrs.fields(cls)
    names = tuple(f.name for f in fields)
    if len(names) < 2 or any(not f.init or f.alias != f.name for f in fields):
        return None
    return names, operator.attrgetter(*names)


def _plans(*classes: type) -> Mapping[type, _Plan]:
    plans: dict[type, _Plan] = {}
    for cls in classes:
        plan = _plan(cls)
        if plan is None:
            raise RuntimeError(f"replace: {cls.__name__} cannot be copied by one __init__")
        plans[cls] = plan
    return types.MappingProxyType(plans)


#: The engine's per-event copies: the run's snapshot and a step's state.
_PLANS: Final = _plans(RunSnapshot, StepState)


def replace(inst: T, **changes: Any) -> T:
    """``attrs.evolve(inst, **changes)``, the same value, at a few calls (a name that is not a
    field is the same ``TypeError`` from ``__init__``)."""
    cls = type(inst)
    try:
        names, get = _PLANS[cls]
    except KeyError:
        same: T = attrs.evolve(inst, **changes)  # type: ignore[misc]  # an attrs class
        return same
    values = dict(zip(names, get(inst), strict=True))
    values.update(changes)
    new: T = cls(**values)
    return new
