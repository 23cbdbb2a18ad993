"""The ```python blocks of the documentation, and the markers that say how to run them.

A block runs as written. What it needs beyond itself is said in the Markdown, in HTML
comments right before its opening fence (blank lines may come between; several may stack):

``<!-- snippet: continues -->``
    runs after the previous block of the page, in its namespace and working directory (a
    block that builds on the one before, as the reader does).
``<!-- snippet: skip (reason) -->``
    is not run; the test reports it skipped with the reason. For the few blocks that need
    what a test cannot have (a Django project's settings module, a package durabl's tests
    do not install).
``<!-- snippet: file PATH -->``
    is also a file of the reader's project: it is written to PATH under the working
    directory, which is on ``sys.path``, and run by importing it (``myapp/jobs.py`` is the
    module ``myapp.jobs``), so later blocks can import it.
``<!-- snippet: process -->``, ``<!-- snippet: process, prints "TEXT" -->``
    is a program that runs until it is stopped (a worker): it runs in a subprocess; once it
    handles SIGTERM (and printed TEXT), the test sends SIGTERM and expects exit status 0.
``<!-- snippet: needs mongodb -->``, ``<!-- snippet: needs postgresql -->``
    runs with ``DURABL_URL`` (and, for MongoDB, ``MONGO_URL``) naming a real server: the
    session's MongoDB (``tests.conftest.require_mongo``), or the test PostgreSQL in a
    schema of its own; what the block created there is dropped afterwards. Without it,
    both variables are unset, so ``os.environ.get("DURABL_URL", default)`` takes the
    default.
``<!-- snippet: needs django -->``
    is code of a Django project: it runs in a process of its own, Django set up with
    :mod:`tests.docs.django_project` (durabl_django, the contrib apps, ``myapp`` once a
    block wrote it) in the working directory and its database migrated; its given code
    runs there too. A ``file`` block is imported there. Blocks that continue it share its
    working directory (files, the SQLite databases), not its namespace. With ``needs
    postgresql`` the site's database is the PostgreSQL schema and ``DURABL`` is
    ``{"URL": "django://default"}``.
``<!-- snippet: given`` *code* ``-->``
    runs *code* first, in the block's namespace: stand-ins for the reader's own objects
    (a mail client, a payment API), which the page does not show being built.

A fence whose info string is ``python signature`` (first word ``python``, so it is still
highlighted as Python) is a signature in a reference page, not code to run; it is not
collected.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Every page whose ```python blocks are collected.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<body>.*?)\s*(?P<end>-->)?\s*$")
_PROCESS = re.compile(r'^process(?:\s*,\s*prints\s+"(?P<text>[^"]+)")?$')
_SKIP = re.compile(r"^skip\s*\((?P<reason>.+)\)$")
STORES = ("mongodb", "postgresql")
#: What ``needs`` may name: a store's server, or a Django project.
NEEDS = (*STORES, "django")


class MarkerError(ValueError):
    """A snippet marker that cannot be read, or that stands where no block follows."""


@dataclass
class Block:
    """One ```python block and what its markers say."""

    page: Path
    name: str  # the page's path from the repository root, as ids show it
    line: int  # of the opening fence, 1-based
    code: str  # dedented to the fence's indentation
    continues: bool = False
    skip: str | None = None
    file: str | None = None
    process: bool = False
    prints: str | None = None
    needs: list[str] = field(default_factory=list)
    given: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.name}:{self.line}"

    @property
    def first_line(self) -> str:
        """The first line of code that is not blank (names a block across line shifts)."""
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")

    def source(self) -> str:
        """The code, placed at its own line of the page so a traceback points there."""
        return "\n" * self.line + self.code


def _apply(block: Block, body: str) -> None:
    """Record one marker's ``body`` (the text after ``snippet:``) on ``block``."""
    skip = _SKIP.match(body)
    process = _PROCESS.match(body)
    if body == "continues":
        block.continues = True
    elif skip:
        block.skip = skip.group("reason").strip()
    elif body.startswith("file "):
        block.file = body[len("file ") :].strip()
    elif process:
        block.process = True
        block.prints = process.group("text")
    elif body.startswith("needs ") and body[len("needs ") :].strip() in NEEDS:
        block.needs.append(body[len("needs ") :].strip())
    else:
        raise MarkerError(f"unknown snippet marker {body!r}")


def read_page(page: Path, root: Path = ROOT) -> list[Block]:
    """Every ```python block of ``page`` with its markers; ``MarkerError`` for a marker
    that is malformed or not directly before a block. Ids name the page from ``root``."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str]] = []  # (line, marker body) waiting for a block
    given: list[str] = []
    index = 0
    where = page.relative_to(root).as_posix()
    while index < len(lines):
        line = lines[index]
        marker = _MARKER.match(line)
        fence = _FENCE.match(line)
        if marker:
            body = marker.group("body")
            if body == "given" or body.startswith("given "):
                code = [body[len("given") :]] if marker.group("end") else []
                if not marker.group("end"):
                    index += 1
                    while index < len(lines) and lines[index].strip() != "-->":
                        code.append(lines[index])
                        index += 1
                    if index == len(lines):
                        raise MarkerError(f"{where}:{index}: a given marker is never closed")
                given.append(textwrap.dedent("\n".join(code)).strip())
            elif not marker.group("end"):
                raise MarkerError(f"{where}:{index + 1}: a snippet marker is one line")
            else:
                pending.append((index + 1, body))
        elif fence:
            info = fence.group("info").split()
            end = index + 1
            while end < len(lines) and not lines[end].strip().startswith(fence.group("fence")):
                end += 1
            if info == ["python"]:
                text = textwrap.dedent("\n".join(lines[index + 1 : end])) + "\n"
                block = Block(page, where, index + 1, text, given=given)
                for at, body in pending:
                    try:
                        _apply(block, body)
                    except MarkerError as exc:
                        raise MarkerError(f"{where}:{at}: {exc}") from None
                blocks.append(block)
            elif pending or given:
                raise MarkerError(f"{where}:{index + 1}: snippet markers before a non-python block")
            pending, given = [], []
            index = end
        elif line.strip() and (pending or given):
            at = pending[0][0] if pending else index
            raise MarkerError(f"{where}:{at}: a snippet marker not directly before a block")
        index += 1
    if pending or given:
        raise MarkerError(f"{where}: snippet markers after the last block")
    return blocks


def groups(blocks: list[Block]) -> list[list[Block]]:
    """The blocks of one page, each with the blocks that continue it."""
    runs: list[list[Block]] = []
    for block in blocks:
        if block.continues:
            if not runs:
                raise MarkerError(f"{block.id}: 'continues', but no block comes before it")
            runs[-1].append(block)
        else:
            runs.append([block])
    return runs
