"""The traceback stored with a failed attempt: the user's frames, durabl's own folded.

A handler's error passes through durabl's run, hook and orchestration frames before it is
caught; printed in full they outnumber the user's (ten of eleven with a few run hooks).
Each run of durabl frames that comes before one of the user's is folded into one line,
``  [3 durabl frames hidden]``. Every user frame stays, and so do the exception lines and
chained causes and contexts. Durabl frames after the last user frame stay too: there the
error was raised inside durabl, and they say where. Set ``DURABL_FULL_TRACEBACKS=1`` to
store every frame (docs/operations.md, "Failed jobs").
"""

from __future__ import annotations

import functools
import os
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

#: Set (``1``) in a worker's environment to store tracebacks with durabl's frames shown.
FULL_TRACEBACKS_ENV = "DURABL_FULL_TRACEBACKS"

F = TypeVar("F")
FramePredicate = Callable[[traceback.FrameSummary], bool]


@functools.lru_cache(maxsize=1)
def _package_roots() -> tuple[str, ...]:
    """The durabl package's directory as imported and as resolved: a frame's file name is
    the path its module was imported by."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    roots = (package, os.path.realpath(package))
    return tuple(dict.fromkeys(os.path.normcase(root) + os.sep for root in roots))


def fold_frames(frames: Sequence[F], is_library: Callable[[F], bool]) -> list[F | int]:
    """``frames`` with each run of library frames that comes before a user frame replaced
    by the number of frames in it. Library frames after the last user frame are kept (the
    error was raised there), and so are all the frames when none is the user's. Pure."""
    last_user = max((i for i, frame in enumerate(frames) if not is_library(frame)), default=-1)
    folded: list[F | int] = []
    hidden = 0
    for index, frame in enumerate(frames):
        if index < last_user and is_library(frame):
            hidden += 1
            continue
        if hidden:
            folded.append(hidden)
            hidden = 0
        folded.append(frame)
    return folded


@functools.lru_cache(maxsize=1024)
def is_durabl_file(filename: str) -> bool:
    """Whether ``filename`` is a module of the durabl package (installed or a checkout)."""
    if filename.startswith("<"):  # <string>, <frozen ...>: no file of durabl's
        return False
    return os.path.normcase(os.path.abspath(filename)).startswith(_package_roots())


def is_durabl_frame(frame: traceback.FrameSummary) -> bool:
    return is_durabl_file(frame.filename)


def hidden_line(count: int) -> str:
    return f"  [{count} durabl frame{'' if count == 1 else 's'} hidden]\n"


class FoldedStack(traceback.StackSummary):
    """A stack that formats with library frames folded (see :func:`fold_frames`)."""

    def __init__(self, frames: Sequence[traceback.FrameSummary], is_library: FramePredicate):
        super().__init__(frames)
        self.is_library = is_library

    def format(self, **options: Any) -> list[str]:
        lines: list[str] = []
        shown: list[traceback.FrameSummary] = []
        for item in fold_frames(list(self), self.is_library):
            if isinstance(item, int):
                lines += traceback.StackSummary.from_list(shown).format(**options)
                shown = []
                lines.append(hidden_line(item))
            else:
                shown.append(item)
        lines += traceback.StackSummary.from_list(shown).format(**options)
        return lines


def _chain(top: traceback.TracebackException) -> Iterator[traceback.TracebackException]:
    """``top`` and every exception it carries: causes, contexts, group members."""
    seen: set[int] = set()
    pending = [top]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [
            current.__cause__,
            current.__context__,
            *(getattr(current, "exceptions", None) or []),
        ]
        pending += [exc for exc in linked if exc is not None]


def format_folded(exc: BaseException, is_library: FramePredicate = is_durabl_frame) -> str:
    """``traceback.format_exception(exc)``, with each stack of the chain folded."""
    formatted = traceback.TracebackException(type(exc), exc, exc.__traceback__)
    for each in _chain(formatted):
        each.stack = FoldedStack(each.stack, is_library)
    return "".join(formatted.format())


def full_tracebacks() -> bool:
    """Whether ``DURABL_FULL_TRACEBACKS`` asks for every frame."""
    value = os.environ.get(FULL_TRACEBACKS_ENV, "").strip().lower()
    return value not in ("", "0", "false", "no", "off")


def format_failure_traceback(exc: BaseException) -> str:
    """The traceback stored with a failed attempt: folded, or in full when
    ``DURABL_FULL_TRACEBACKS`` is set."""
    if full_tracebacks():
        return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return format_folded(exc)
