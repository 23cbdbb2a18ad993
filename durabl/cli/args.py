"""Argument types shared by the command lines built on durabl: ``python -m durabl`` and
Django's ``manage.py runworkers`` / ``reap`` (which reach them as ``durabl.positive_int_arg``
and ``durabl.positive_seconds_arg``). Each turns the text of an option into its value or
raises ``argparse.ArgumentTypeError`` with a one-line message."""

from __future__ import annotations

import argparse


def positive_int_arg(text: str) -> int:
    """A whole number of at least 1 (``--concurrency``, ``--jobs``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def positive_seconds_arg(text: str) -> float:
    """A finite number of seconds above 0 (timeouts and durations)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value
