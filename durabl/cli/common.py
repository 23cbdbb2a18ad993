"""What every store command of ``durabl`` shares: the ``--url`` / ``--json`` options, opening
a store with a bounded connect time (as it is, for the commands that only read), turning a
store failure into one line that names the URL (password hidden), and printing a table or
JSON.

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
from datetime import datetime, timezone
from typing import Any, TextIO, TypeAlias
from urllib.parse import urlsplit, urlunsplit

from durabl.model.exceptions import DurablError, StoreNotFoundError
from durabl.runtime.queue import JobQueue
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
SQLITE_SCHEME = "sqlite"
#: What a command that only reads says after "there is no store there".
CHECK_OR_MIGRATE = "check the URL; `durabl migrate` sets up a store"


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
    ``description`` atop its ``--help``, then the example command lines, if any. It is
    ``args.command_parser`` once parsed, to report a usage error with its own usage."""
    if not example_lines:
        parser = sub.add_parser(name, help=help, description=description)
    else:
        parser = sub.add_parser(
            name,
            help=help,
            description=description,
            epilog=examples(*example_lines),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    parser.set_defaults(command_parser=parser)
    return parser


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


@contextmanager
def opened(args: argparse.Namespace, *, read_only: bool = False) -> Iterator[JobQueue]:
    """A queue on the command's store, closed afterwards; store errors as one line.
    ``read_only``: the store must be there and set up (see :func:`open_existing_store`)."""
    url = store_url(args)
    with store_errors(url):
        queue = JobQueue(open_existing_store(url) if read_only else open_store(url))
        try:
            yield queue
        finally:
            queue.backend.close()


def store_parser(
    sub: Sub, name: str, help: str, description: str, *example_lines: str
) -> argparse.ArgumentParser:
    """:func:`command_parser` with the store options ``--url`` and ``--json``."""
    p = command_parser(sub, name, help, description, *example_lines)
    add_url_option(p)
    add_json_option(p)
    return p


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


def open_store(url: str, *, create: bool = True) -> Backend:
    """The store for ``url``, with its connect time bounded (nothing connects yet).
    Without ``create``, a SQLite file that is not there raises ``StoreNotFoundError`` when
    first used, rather than being created."""
    scheme = url.split("://", 1)[0].lower()
    options: dict[str, Any] = {}
    if scheme in MONGO_SCHEMES:
        options["connect_timeout"] = connect_timeout()
    if scheme == SQLITE_SCHEME and create:
        check_sqlite_path(url)
    elif scheme == SQLITE_SCHEME:
        options["create"] = False
    return backend_from_url(url, **options)


def open_existing_store(url: str) -> Backend:
    """The store for ``url`` as it is, for a command that only reads: one that is not
    there (no SQLite file, no PostgreSQL tables, no MongoDB indexes) or that this release
    would first migrate is a :class:`CommandError`. Reading then creates and changes
    nothing, and a mistyped URL is an error rather than an empty, healthy queue."""
    backend = open_store(url, create=False)
    try:
        problem = setup_problem(backend, url)
    except BaseException:
        backend.close()
        raise
    if problem is not None:
        backend.close()
        raise CommandError(problem)
    return backend


def setup_problem(backend: Backend, url: str) -> str | None:
    """Why ``backend`` cannot be read as it is (None: it can), asked of the store without
    changing it."""
    where = redact(url)
    try:
        version = backend.schema_version()
    except StoreNotFoundError as exc:
        return f"no store at {where}: {exc.filename} does not exist ({CHECK_OR_MIGRATE})"
    if version is None:
        missing = backend.pending_setup()
        if missing:
            names = ", ".join(missing[:3]) + (
                f" and {len(missing) - 3} more" if missing[3:] else ""
            )
            return (
                f"{where}: durabl's indexes {names} are missing: no store here, or one an "
                f"older release set up ({CHECK_OR_MIGRATE})"
            )
        return None
    if version.current == 0:
        return f"{where} holds no durabl store ({CHECK_OR_MIGRATE})"
    if version.pending:
        return (
            f"{where}: schema version {version.current} is older than this release's "
            f"{version.latest}; run `durabl migrate` first (a command that only reads changes "
            "nothing)"
        )
    return None


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
        return utc_text(value)
    if isinstance(value, float):
        return f"{value:.1f}"
    text = str(value).replace("\n", " ")
    return text if len(text) <= 60 else text[:57] + "..."


def utc_text(instant: datetime) -> str:
    """``2026-03-02 08:00:03 UTC``: stores keep instants in UTC (a naive one is UTC too),
    and a table says so, beside a schedule's own time zone."""
    if instant.tzinfo is not None:
        instant = instant.astimezone(timezone.utc)
    return instant.strftime("%Y-%m-%d %H:%M:%S UTC")


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
