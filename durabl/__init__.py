"""durabl: a small, durable job queue on your application's own database."""

from __future__ import annotations

__version__ = "0.1.0.dev0"
