"""``trio.run`` on the autojump clock with Trio's scheduler deterministic, through public APIs
only.

Trio registers a Hypothesis plugin (its ``hypothesis`` entry point): importing Hypothesis turns
Trio's scheduler deterministic (each batch of runnable tasks in spawn order, then shuffled by
Trio's generator) and hands that generator to ``hypothesis.register_random``, so Hypothesis sets
it to one fixed state at the start of every test case (and restores it after). A ``trio.run`` on
a fresh autojump clock, run as the one example of a Hypothesis test, therefore schedules its
tasks the same way every time: Trio's choices become a function of what the run does, and when
all it does follows from a seed (the chaos soak's schedule and ids, :func:`crash_test`'s), one
seed gives one trace.

The generator starts from the same state whatever the seed: Hypothesis's own seeding is fixed,
and ``st.random_module()`` under ``@seed(n)`` with one example draws 0 (its simplest example) for
every ``n``. Seeds differ through what they change in the run.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar, TypeVarTuple, final

import trio
import trio.testing

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Hypothesis skips its plugins (Trio's among them) when this is set.
NO_PLUGINS_ENV: Final = "HYPOTHESIS_NO_PLUGINS"


@final
class SchedulingUnavailable(RuntimeError):
    """Deterministic scheduling cannot be had here (Hypothesis missing, or its plugins off)."""


def run_deterministic(async_fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
    """``trio.run(async_fn, *args)`` on a fresh ``MockClock(autojump_threshold=0)`` with Trio's
    scheduler deterministic: see the module docstring. Returns what the run returns and raises
    what it raises, once: it is a passing example whatever it does, so Hypothesis never replays
    or shrinks it, prints nothing and (``database=None``) writes no ``.hypothesis`` directory.

    Raises :class:`SchedulingUnavailable` if Hypothesis is not installed or its plugins are
    turned off; nothing runs then. Called inside a ``@given`` test it is a nested ``@given``:
    that test must suppress ``HealthCheck.nested_given`` (Hypothesis says so if not).
    """
    if os.environ.get(NO_PLUGINS_ENV):
        raise SchedulingUnavailable(
            f"deterministic scheduling needs Trio's Hypothesis plugin: unset {NO_PLUGINS_ENV}"
        )
    try:
        import hypothesis
        from hypothesis import strategies as st
    except ImportError:
        raise SchedulingUnavailable(
            "deterministic scheduling needs Hypothesis (Trio's plugin seeds its scheduler): "
            "pip install hypothesis"
        ) from None
    returned: list[T] = []
    raised: list[BaseException] = []

    @hypothesis.settings(
        database=None,
        max_examples=1,
        phases=[hypothesis.Phase.explicit],
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        print_blob=False,
        verbosity=hypothesis.Verbosity.quiet,
    )
    @hypothesis.example(None)
    @hypothesis.given(st.none())
    def one_example(_: None) -> None:
        # Everything is caught, KeyboardInterrupt too (re-raised below, at once): a failing
        # example would be run again and reported as "Falsifying". The clock is made here: it
        # draws its offset from Trio's generator, which is in its fixed state only now.
        try:
            clock = trio.testing.MockClock(autojump_threshold=0)
            returned.append(trio.run(async_fn, *args, clock=clock))
        except BaseException as exc:
            raised.append(exc)

    one_example()
    if raised:
        raise raised[0]
    (value,) = returned
    return value
