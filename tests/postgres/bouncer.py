"""A PgBouncer in transaction mode in front of the test PostgreSQL server, for a test.

From the machine's ``pgbouncer`` binary (Debian: ``apt-get install pgbouncer``): a config
file in a temporary directory, a free port of 127.0.0.1, trust authentication, at most
two server connections for every client (so clients take turns on them, as in production);
as root it runs as the ``postgres`` user, since PgBouncer refuses root.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from urllib.parse import urlsplit, urlunsplit

from tests.postgres.server import NoServerError, free_port

START_TIMEOUT = 15.0


class Bouncer:
    """A running PgBouncer; :meth:`stop` ends it and removes its directory."""

    def __init__(self, directory: str, port: int, process: subprocess.Popen[bytes]) -> None:
        self.directory = directory
        self.port = port
        self.process = process
        self.url = ""  # the server's URL with PgBouncer's address, once it answers

    @classmethod
    def start(cls, server_url: str, pool_mode: str = "transaction") -> Bouncer:
        """One in front of the server at ``server_url``, or :class:`NoServerError`."""
        binary = shutil.which("pgbouncer") or (
            "/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None
        )
        if binary is None:
            raise NoServerError("no pgbouncer binary (apt-get install pgbouncer)")
        server = urlsplit(server_url)
        as_user: list[str] = []
        owner: tuple[int, int] | None = None  # the files' owner when run as another user
        directory = tempfile.mkdtemp(prefix="durabl-bouncer-")
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            import pwd

            runuser = shutil.which("runuser")
            try:
                account = pwd.getpwnam("postgres")
            except KeyError:
                account = None
            if runuser is None or account is None:
                shutil.rmtree(directory, ignore_errors=True)
                raise NoServerError("running as root: no 'postgres' user or no runuser")
            owner = (account.pw_uid, account.pw_gid)
            as_user = [runuser, "-u", "postgres", "--"]
        port = free_port()
        database = server.path.lstrip("/") or "postgres"
        user = server.username or "postgres"
        config = os.path.join(directory, "pgbouncer.ini")
        with open(config, "w") as out:
            out.write(
                f"[databases]\n"
                f"{database} = host={server.hostname or '127.0.0.1'} "
                f"port={server.port or 5432} dbname={database} user={user}\n"
                f"[pgbouncer]\n"
                f"listen_addr = 127.0.0.1\n"
                f"listen_port = {port}\n"
                f"unix_socket_dir =\n"
                f"auth_type = trust\n"
                f"auth_file = {os.path.join(directory, 'users.txt')}\n"
                f"pool_mode = {pool_mode}\n"
                f"default_pool_size = 2\n"
                f"max_client_conn = 200\n"
                f"ignore_startup_parameters = extra_float_digits\n"
                f"logfile = {os.path.join(directory, 'pgbouncer.log')}\n"
            )
        with open(os.path.join(directory, "users.txt"), "w") as out:
            out.write(f'"{user}" ""\n')
        if owner is not None:
            for path in (directory, config, os.path.join(directory, "users.txt")):
                os.chown(path, *owner)
        process = subprocess.Popen(
            [*as_user, binary, config],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=directory,
        )
        bouncer = cls(directory, port, process)
        deadline = time.monotonic() + START_TIMEOUT
        while not bouncer._answers():
            if process.poll() is not None or time.monotonic() > deadline:
                error = process.stderr.read().decode(errors="replace") if process.stderr else ""
                bouncer.stop()
                lines = error.strip().splitlines()
                raise NoServerError(f"pgbouncer did not start: {lines[-1] if lines else '?'}")
            time.sleep(0.05)
        netloc = f"{user}@127.0.0.1:{port}"
        bouncer.url = urlunsplit(server._replace(netloc=netloc))
        return bouncer

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process.stderr:
            self.process.stderr.close()
        shutil.rmtree(self.directory, ignore_errors=True)
