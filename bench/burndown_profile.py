"""Where a durabl worker process spends its CPU during a burn-down: ``run`` under
``py-spy record --subprocesses`` (py-spy cannot attach to a running process on this
machine, but follows the processes it starts), then the samples of the spawned worker
processes summed by leaf function, by package and by thread entry point.

py-spy samples, at 97 Hz, only the thread holding the GIL (``--gil``: the Python work of
the process, not its waits on the database), ``--nonblocking`` (the workers are not
paused to be read, so the profile does not slow them).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

SPAWNED = "spawn_main"  # the command line of a multiprocessing worker process
RATE = 97
TOP = 25
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")


def profile_run(script: Path, run_args: list[str], results: Path) -> int:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    args = [a for a in run_args if a != "--"]
    tag = next((a.split("=", 1)[1] for a in args if a.startswith("--tag=")), "")
    raw = results / f"burndown-profile{tag}.txt"
    command = [
        spy,
        "record",
        "--subprocesses",
        "--nonblocking",
        "--gil",
        "-r",
        str(RATE),
        "-f",
        "raw",
        "-o",
        str(raw),
        "--",
        sys.executable,
        str(script),
        "run",
        *args,
    ]
    code = subprocess.call(command)
    summary = summarise(raw)
    summary["command"] = " ".join(["bench/burndown.py", "run", *args])
    out = results / f"burndown-profile{tag}.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    raw.unlink(missing_ok=True)  # large; the summary keeps what the docs use
    print_summary(summary)
    print(f"saved {out}")
    return code


def _parse(frame: str) -> tuple[str, str]:
    m = _FRAME.match(frame)
    if m is None:
        return frame, ""
    return m["func"], m["file"]


def _package(file: str) -> str:
    if "durabl/" in file:
        return "durabl/" + file.split("durabl/", 1)[1].split("/", maxsplit=1)[0].removesuffix(".py")
    for name in ("psycopg_pool", "psycopg", "threading", "queue", "selectors", "socket"):
        if f"{name}/" in file or file.startswith(f"{name}.py") or f"/{name}.py" in file:
            return name
    return file.split("/", maxsplit=1)[0] if "/" in file else file


def summarise(raw: Path) -> dict[str, Any]:
    """Samples of the worker processes: by leaf function (self), by package of the leaf,
    by durabl function anywhere on the stack (inclusive), and by thread entry point."""
    self_time: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    entries: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        frames = stack.split(";")
        worker = [i for i, f in enumerate(frames) if f.startswith("process ") and SPAWNED in f]
        if not worker:
            continue
        code_frames = [
            f
            for f in frames[worker[-1] + 1 :]
            if not f.startswith("thread ") and "--multiprocessing-fork" not in f
        ]
        if not code_frames:
            continue
        n = int(count_text)
        total += n
        func, file = _parse(code_frames[-1])
        self_time[f"{func} ({file})"] += n
        packages[_package(file)] += n
        seen = set()
        for frame in code_frames:
            func, file = _parse(frame)
            if "durabl/" in file and (func, file) not in seen:
                seen.add((func, file))
                inclusive[f"{func} ({file.split('durabl/', 1)[1]})"] += n
        entries[_entry(code_frames)] += n

    def share(counter: Counter[str]) -> list[list[Any]]:
        return [[k, v, round(100.0 * v / max(total, 1), 1)] for k, v in counter.most_common(TOP)]

    return {
        "samples": total,
        "rate_hz": RATE,
        "self": share(self_time),
        "packages": share(packages),
        "inclusive_durabl": share(inclusive),
        "threads": share(entries),
    }


def _entry(frames: list[str]) -> str:
    """The thread's entry: the first frame below threading's bootstrap, else the main."""
    for i, frame in enumerate(frames):
        func, _ = _parse(frame)
        if func == "Thread.run" and i + 1 < len(frames):
            return _parse(frames[i + 1])[0]
    return "main thread"


def print_summary(summary: dict[str, Any]) -> None:
    print(f"worker samples: {summary['samples']} at {summary['rate_hz']} Hz")
    for section in ("threads", "packages", "self", "inclusive_durabl"):
        print(f"-- {section}")
        for name, n, pct in summary[section][:15]:
            print(f"{pct:5.1f}%  {n:6d}  {name}")
