"""Folding durabl's own frames out of stored tracebacks: which frames fold, that every user
frame, exception line and chained exception stays, and the switch that shows everything."""

from __future__ import annotations

import builtins
import os
import traceback
from typing import Any

import pytest

import durabl
import durabl.runtime.run
from durabl.runtime.tracebacks import (
    FULL_TRACEBACKS_ENV,
    fold_frames,
    format_failure_traceback,
    format_folded,
    full_tracebacks,
    is_durabl_file,
)


def library(name: str) -> bool:
    return name.startswith("lib")


@pytest.mark.parametrize(
    ("frames", "folded"),
    [
        # before, between and after the user's frames: only the last run stays
        (["lib1", "lib2", "user", "lib3", "user2", "lib4"], [2, "user", 1, "user2", "lib4"]),
        (["user", "user2"], ["user", "user2"]),
        (["lib1", "lib2"], ["lib1", "lib2"]),  # no user frame: the error is durabl's
        ([], []),
        (["lib1", "user"], [1, "user"]),
    ],
)
def test_runs_of_library_frames_before_a_user_frame_fold_into_their_count(
    frames: list[str], folded: list[object]
) -> None:
    assert fold_frames(frames, library) == folded


# The "library" of the tests below: functions named lib_*, folded by their name.
def lib_runner(call: object) -> None:
    lib_inner(call)


def lib_inner(call: object) -> None:
    assert callable(call)
    call()


def lib_raise() -> None:
    raise KeyError("inside the library")


def user_helper(n: int) -> None:
    raise ValueError(f"bad {n}")


def user_handler() -> None:
    try:
        user_helper(1)
    except ValueError as exc:
        raise RuntimeError("the handler gave up") from exc


def user_calls_library() -> None:
    lib_raise()


def is_lib_frame(frame: traceback.FrameSummary) -> bool:
    return frame.name.startswith("lib_")


def caught(call: object) -> BaseException:
    try:
        lib_runner(call)
    except BaseException as exc:
        return exc
    raise AssertionError("nothing raised")


def frame_names(text: str) -> list[str]:
    return [line.rsplit(" in ", 1)[1] for line in text.splitlines() if line.startswith("  File")]


def test_user_frames_chained_causes_and_exception_lines_all_stay() -> None:
    exc = caught(user_handler)
    folded = format_folded(exc, is_lib_frame)
    full = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    assert frame_names(folded) == ["user_handler", "user_helper", "caught", "user_handler"]
    assert "  [2 durabl frames hidden]\n" in folded  # lib_runner, lib_inner
    assert folded.count("hidden]") == 1  # the cause's stack has no library frame
    assert "The above exception was the direct cause of the following exception:" in folded
    assert "ValueError: bad 1" in folded
    assert folded.rstrip().endswith("RuntimeError: the handler gave up")
    # nothing but the library's frame lines went
    kept = [line for line in full.splitlines() if line in folded.splitlines()]
    assert len(kept) == len(full.splitlines()) - 2 * 2  # each frame: its File line and code


def test_library_frames_where_the_error_was_raised_stay() -> None:
    folded = format_folded(caught(user_calls_library), is_lib_frame)
    assert frame_names(folded) == ["caught", "user_calls_library", "lib_raise"]
    assert "  [2 durabl frames hidden]\n" in folded
    assert folded.rstrip().endswith("KeyError: 'inside the library'")


def test_a_context_and_a_group_are_folded_too() -> None:
    def during_handling() -> None:
        try:
            lib_runner(lambda: user_helper(2))
        except ValueError:
            raise RuntimeError("while handling")  # noqa: B904 - the context is the point

    exc = caught(during_handling)
    folded = format_folded(exc, is_lib_frame)
    assert "During handling of the above exception" in folded
    assert folded.count("durabl frames hidden") == 2
    group_type = getattr(builtins, "ExceptionGroup", None)  # Python 3.11 on
    if group_type is not None:
        group = group_type("many", [caught(user_handler)])
        text = format_folded(group, is_lib_frame)
        assert "durabl frames hidden" in text and "the handler gave up" in text


def test_durabl_files_are_the_package_s_own() -> None:
    assert is_durabl_file(durabl.runtime.run.__file__)
    assert is_durabl_file(os.path.relpath(durabl.runtime.run.__file__))
    assert not is_durabl_file(__file__)
    assert not is_durabl_file(traceback.__file__)


@pytest.mark.parametrize(
    ("value", "full"), [(None, False), ("", False), ("0", False), ("1", True), ("yes", True)]
)
def test_durabl_full_tracebacks_shows_every_frame(
    value: str | None, full: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv(FULL_TRACEBACKS_ENV, raising=False)
    else:
        monkeypatch.setenv(FULL_TRACEBACKS_ENV, value)
    assert full_tracebacks() is full
    # A function compiled as if it were a module of the durabl package.
    namespace: dict[str, Any] = {}
    fake = os.path.join(os.path.dirname(durabl.__file__), "runtime", "calls.py")
    exec(compile("def call(f):\n    f()\n", fake, "exec"), namespace)
    try:
        namespace["call"](lambda: user_helper(3))
    except ValueError as exc:
        text = format_failure_traceback(exc)
    assert (fake in text) is full
    assert ("[1 durabl frame hidden]" in text) is not full
    assert frame_names(text)[-2:] == ["<lambda>", "user_helper"]
