"""What every store command of ``durabl`` shares: the ``--url`` / ``--json`` options, opening
a store with a bounded connect time, turning a store failure into one line that names the
URL (password hidden), and printing a table or JSON.

Also used by Django's ``manage.py runworkers`` / ``reap`` through the public names they
need (the argument types live in :mod:`durabl.cli.args`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any, TextIO, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from durabl.model.exceptions import DurablError
from durabl.stores.base import Backend
from durabl.stores.urls import backend_from_url

URL_ENV = "DURABL_URL"
Sub: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # noqa: SLF001

#: Seconds a store may take to answer a command before it gives up (MongoDB's own server
#: selection would wait 30 s; PostgreSQL's ``connect_timeout`` defaults to 5 s). Override
#: with ``$DURABL_CONNECT_TIMEOUT``.
CONNECT_TIMEOUT = 5.0
CONNECT_TIMEOUT_ENV = "DURABL_CONNECT_TIMEOUT"
MONGO_SCHEMES = ("mongodb", "mongodb+srv")


class CommandError(DurablError):
    """A command cannot do what it was asked: printed as one line, exit code 1."""


class UsageError(DurablError):
    """The command line is incomplete (say no ``--url`` and no ``$DURABL_URL``): exit 2."""


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<unparsable URL>"
    if password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def connect_timeout() -> float:
    """The bound on reaching the store: ``$DURABL_CONNECT_TIMEOUT`` or 5 s."""
    text = os.environ.get(CONNECT_TIMEOUT_ENV)
    if not text:
        return CONNECT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise UsageError(
            f"${CONNECT_TIMEOUT_ENV} must be a number of seconds, got {text!r}"
        ) from None
    if not 0 < value <= 3600:
        raise UsageError(f"${CONNECT_TIMEOUT_ENV} must be between 0 and 3600 s, got {text}")
    return value


def command_parser(
    sub: Sub, name: str, help: str, description: str, *example_lines: str
) -> argparse.ArgumentParser:
    """The parser of the subcommand ``name``: ``help`` in the list of commands,
    ``description`` atop its ``--help``, then the example command lines, if any."""
    if not example_lines:
        return sub.add_parser(name, help=help, description=description)
    return sub.add_parser(
        name,
        help=help,
        description=description,
        epilog=examples(*example_lines),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def add_url_option(parser: argparse.ArgumentParser) -> None:
    """``--url``, optional on the command line: it defaults to ``$DURABL_URL``."""
    parser.add_argument(
        "--url",
        default=None,
        metavar="URL",
        help=f"store URL, e.g. sqlite:///jobs.db or postgresql://app@db/app (default: ${URL_ENV})",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def store_url(args: argparse.Namespace) -> str:
    """``--url``, else ``$DURABL_URL``; a :class:`UsageError` naming both when neither."""
    url: str | None = args.url or os.environ.get(URL_ENV)
    if not url:
        raise UsageError(f"no store URL: pass --url URL or set ${URL_ENV}")
    return url


def check_sqlite_path(url: str) -> None:
    """SQLite says only "unable to open database file" for a missing directory: name it."""
    if not url.lower().startswith("sqlite://"):
        return
    from durabl.stores.urls import sqlite_path

    path = sqlite_path(url)
    if path == ":memory:" or path.startswith("file:"):
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise CommandError(
            f"cannot open {url}: the directory {directory} does not exist (the database "
            f"file {path} is created, its directory is not)"
        )


def open_store(url: str) -> Backend:
    """The store for ``url``, with its connect time bounded (nothing connects yet)."""
    check_sqlite_path(url)
    options: dict[str, Any] = {}
    if url.split("://", 1)[0].lower() in MONGO_SCHEMES:
        options["connect_timeout"] = connect_timeout()
    return backend_from_url(url, **options)


@contextmanager
def store_errors(url: str) -> Iterator[None]:
    """Turn any failure of the store into one :class:`CommandError` line naming ``url``."""
    try:
        yield
    except (CommandError, UsageError):
        raise
    except DurablError as exc:
        if redact(url) in str(exc):  # the store named itself already (PostgreSQL does)
            raise CommandError(one_line(exc)) from exc
        raise CommandError(f"{redact(url)}: {one_line(exc)}") from exc
    except (OSError, ValueError, TypeError) as exc:
        raise CommandError(f"{redact(url)}: {one_line(exc)}") from exc
    except Exception as exc:  # driver errors (pymongo, psycopg, sqlite3): one line, no dump
        raise CommandError(f"{redact(url)}: {type(exc).__name__}: {one_line(exc)}") from exc


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message, clipped (pymongo's topology dump is not)."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else type(exc).__name__
    cut = text.find(", Timeout: ")  # pymongo: "host: [Errno ...] ..., Timeout: 5s, Topology..."
    if cut > 0:
        text = text[:cut]
    return text if len(text) <= 300 else text[:297] + "..."


# -- output ----------------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: datetimes as ISO 8601, dataclasses as objects."""
    if isinstance(value, datetime):
        return value.isoformat()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)


def print_json(value: Any, out: TextIO | None = None) -> None:
    print(json.dumps(plain(value), indent=2, sort_keys=False), file=out or sys.stdout)


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, float):
        return f"{value:.1f}"
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def print_table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], out: TextIO | None = None
) -> None:
    """A plain aligned table, one header line, or "(none)" when there are no rows."""
    stream = out or sys.stdout
    if not rows:
        print("(none)", file=stream)
        return
    texts = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(t[i]) for t in texts)) for i, c in enumerate(columns)]
    print(
        "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
        file=stream,
    )
    for t in texts:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)).rstrip(), file=stream)


def examples(*lines: str) -> str:
    """An argparse epilog listing example command lines."""
    return "examples:\n" + "\n".join(f"  {line}" for line in lines)
