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
import signal
import socket
import subprocess
import tempfile
import time
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

    # -- faults, for the campaign in tests/chaos: the same cluster, its data kept ---------
    @property
    def socket_url(self) -> str:
        """The ``test`` database through the server's Unix socket (in :attr:`directory`),
        which a client reaches from any network namespace."""
        return f"postgresql://postgres@/test?host={self.directory}&port={self.port}"

    def postmaster_pid(self) -> int | None:
        """The running postmaster's process id, or None."""
        try:
            with open(os.path.join(self.data, "postmaster.pid"), encoding="utf-8") as pid_file:
                pid = int(pid_file.readline().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def restart(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: sessions ended cleanly; ``immediate``: no shutdown
        checkpoint, crash recovery at start) and start it again with the options it had, on
        the same port; or just start it when it is down (killed, stopped)."""
        log = os.path.join(self.directory, "server.log")  # else its output holds our pipe
        self.run(
            "pg_ctl",
            "-D",
            self.data,
            "-l",
            log,
            "-m",
            mode,
            "-w",
            "-t",
            str(START_TIMEOUT),
            "restart",
        )

    def stop_server(self, mode: str = "fast") -> None:
        """Stop the server and keep its data: :meth:`restart` starts it again."""
        self.run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def kill(self) -> None:
        """SIGKILL the postmaster and every process of the cluster at once (a machine that
        dies, as far as the clients see), then wait until none is left; the data stays
        for :meth:`restart` (crash recovery)."""
        pid = self.postmaster_pid()
        if pid is None:
            return
        pids = [pid, *_children(pid)]
        for each in pids:
            try:
                os.kill(each, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and any(_alive(each) for each in pids):
            time.sleep(0.05)  # processes of another user: nothing to wait on but /proc

    def terminate_backends(self, database: str, application_name: str) -> int:
        """``pg_terminate_backend`` every session of ``database`` whose application name
        starts with ``application_name``; how many were ended."""
        import psycopg

        admin = f"postgresql://postgres@/postgres?host={self.directory}&port={self.port}"
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND application_name LIKE %s AND pid <> pg_backend_pid()",
                (database, application_name + "%"),
            ).fetchall()
        return sum(1 for (ended,) in rows if ended)


def _children(pid: int) -> list[int]:
    """The process ids whose parent is ``pid`` (from /proc)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` is still in the process table: a zombie counts, since pg_ctl and a
    new postmaster both take a process id that answers a signal for a live server."""
    return os.path.exists(f"/proc/{pid}")
