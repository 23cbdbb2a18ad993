"""``durabl.job``: the ``@durabl.job(type, ...)`` decorator, and the old home of the job
records.

Calling this module declares a job type (it is :func:`durabl.runtime.decorator.job`).
It also still re-exports every public name of :mod:`durabl.model.job` (its ``__all__``),
so code written against ``from durabl.job import QueueHealth`` goes on working; import
those from ``durabl`` (or ``durabl.model.job``) in new code.

Why a callable module: ``durabl.job`` can be only one object, and importing the submodule
``durabl.job`` sets that attribute of the package to the module. Were the decorator a
plain function, ``from durabl.job import QueueHealth`` anywhere in a process would
silently replace ``durabl.job`` with a module that cannot decorate.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from durabl.model.job import *  # noqa: F403 - the whole public surface, named there once
from durabl.model.job import __all__  # noqa: F401 - the same names, re-exported
from durabl.runtime.decorator import job as _declare


class _DecoratorModule(types.ModuleType):
    """This module's class: calling it is calling the decorator."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _declare(*args, **kwargs)


_module = sys.modules[__name__]
_module.__class__ = _DecoratorModule
#: ``inspect.signature(durabl.job)`` and ``help()`` show the decorator's.
__wrapped__ = _declare
