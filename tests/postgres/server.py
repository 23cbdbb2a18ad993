"""A throwaway PostgreSQL server for the test session, from the machine's binaries.

Used only when the server at ``DURABL_TEST_POSTGRES_URL`` does not answer (see
``tests/conftest.py``): ``initdb`` into a temporary directory, ``pg_ctl start`` on a free
port of 127.0.0.1 (trust authentication, no fsync: the data is thrown away), a database
named ``test``; :meth:`ThrowawayServer.stop` stops it and removes the directory. ``initdb``
refuses to run as root, so as root the server runs as the ``postgres`` user (``runuser``).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass

START_TIMEOUT = 30


class NoServerError(Exception):
    """No throwaway server can be started here (the message says why, on one line)."""


def find_bindir() -> str | None:
    """The directory of ``initdb`` and ``pg_ctl``: ``$PATH``, ``pg_config --bindir``, or
    the newest ``/usr/lib/postgresql/<version>/bin`` (Debian keeps them off ``$PATH``)."""
    on_path = shutil.which("initdb")
    if on_path:  # often a symbolic link into the real directory
        bindir = os.path.dirname(os.path.realpath(on_path))
        if os.path.exists(os.path.join(bindir, "pg_ctl")):
            return bindir
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            bindir = out.stdout.strip()
            if os.path.exists(os.path.join(bindir, "initdb")):
                return bindir
        except (OSError, subprocess.SubprocessError):
            pass

    def version(path: str) -> tuple[int, ...]:
        found = re.search(r"/postgresql/([\d.]+)/bin$", path)
        return tuple(int(n) for n in found.group(1).split(".")) if found else ()

    dirs = [d for d in glob.glob("/usr/lib/postgresql/*/bin") if os.path.exists(d + "/initdb")]
    return max(dirs, key=version) if dirs else None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ThrowawayServer:
    directory: str
    bindir: str
    port: int
    as_user: list[str]  # the command prefix that runs a binary as the server's user

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    @property
    def data(self) -> str:
        return os.path.join(self.directory, "data")

    @classmethod
    def start(cls) -> ThrowawayServer:
        """Start one, or raise :class:`NoServerError`."""
        bindir = find_bindir()
        if bindir is None:
            raise NoServerError("no PostgreSQL binaries (initdb, pg_ctl) on this machine")
        as_user: list[str] = []
        directory = tempfile.mkdtemp(prefix="durabl-pg-")
        if os.geteuid() == 0:  # initdb refuses root: run the server as 'postgres'
            runuser = shutil.which("runuser")
            try:
                import pwd

                owner = pwd.getpwnam("postgres")
            except KeyError:
                owner = None
            if runuser is None or owner is None:
                shutil.rmtree(directory, ignore_errors=True)
                raise NoServerError(
                    "running as root, and initdb refuses root: no 'postgres' user or no runuser"
                )
            os.chown(directory, owner.pw_uid, owner.pw_gid)
            as_user = [runuser, "-u", "postgres", "--"]
        server = cls(directory, bindir, free_port(), as_user)
        try:
            server.run(
                "initdb",
                "-D",
                server.data,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
                "--no-instructions",
            )
            options = (
                f"-p {server.port} -c listen_addresses=127.0.0.1 -k {directory} "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200"
            )
            server.run(
                "pg_ctl",
                "-D",
                server.data,
                "-o",
                options,
                "-l",
                os.path.join(directory, "server.log"),
                "-w",
                "-t",
                str(START_TIMEOUT),
                "start",
            )
            server.create_database("test")
        except NoServerError:
            server.stop()
            raise
        return server

    def run(self, binary: str, *args: str) -> None:
        command = [*self.as_user, os.path.join(self.bindir, binary), *args]
        try:
            subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT + 10,
                check=True,
                cwd=self.directory,
            )
        except subprocess.CalledProcessError as exc:
            lines = (exc.stderr or exc.stdout or "").strip().splitlines()
            raise NoServerError(f"{binary} failed: {lines[-1] if lines else exc}") from None
        except (OSError, subprocess.SubprocessError) as exc:
            raise NoServerError(f"{binary} failed: {exc}") from None

    def create_database(self, name: str) -> None:
        import psycopg

        admin = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        try:
            with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
        except psycopg.Error as exc:
            raise NoServerError(f"could not create database {name}: {exc}") from None

    def stop(self) -> None:
        """Stop the server (immediately: nothing in it is kept) and remove its directory."""
        if os.path.exists(os.path.join(self.data, "postmaster.pid")):
            try:
                self.run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
            except NoServerError:
                pass
        shutil.rmtree(self.directory, ignore_errors=True)
