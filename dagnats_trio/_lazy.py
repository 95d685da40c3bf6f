"""Lazy re-exports for package ``__init__`` modules (PEP 562 ``__getattr__`` and ``__dir__``).

Why: importing a submodule runs its package's ``__init__`` first, so an ``__init__`` that eagerly
imports its I/O shell loads Trio, NATS and asyncio into every import of the package's pure core
(``import dagnats_trio.engine.core`` would pull in the engine's shell, the transport, nats-py and
trio-asyncio). A package therefore imports its pure submodules eagerly and names the rest here;
they load on first use. The ``if TYPE_CHECKING:`` imports beside each table keep the names
visible to mypy and IDEs, and ``tests/test_layers.py`` checks that the table, those imports and
``__all__`` agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, table: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``; ``table`` maps a submodule (relative, like
    ``"._shell"``) to the names it provides. A loaded name is cached in the package's namespace,
    so each is looked up once."""
    where = {name: module for module, names in table.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__
