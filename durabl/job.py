"""Deprecated home of the job records: import them from ``durabl`` (or ``durabl.model.job``).

Kept so that code written against ``durabl.job`` goes on working: it re-exports every
public name of :mod:`durabl.model.job` (its ``__all__``)."""

from __future__ import annotations

from durabl.model.job import *  # noqa: F403 - the whole public surface, named there once
from durabl.model.job import __all__  # noqa: F401 - the same names, re-exported
