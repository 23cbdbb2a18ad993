"""The stores a campaign may break, each on a server of its own, started for the campaign:

- ``sqlite``: a file per run;
- ``postgres``: a private cluster (initdb as the ``postgres`` user), every commit
  synchronous so that killing the server loses nothing it acknowledged. When network
  namespaces work here (root, ``ip netns``), the cluster runs inside one (``db``) joined
  by a veth pair to another (``wk``), addresses 10.231.0.1 and .2 existing only inside
  the two: a worker started in ``wk`` reaches the server over that link, which a
  partition takes down; every other client uses the server's Unix socket;
- ``pgbouncer``: that cluster behind a PgBouncer in transaction mode (Debian's
  ``pgbouncer``), ``prepare_threshold=none`` and no LISTEN, as docs/postgres.md says;
- ``mongodb``: the SecantusDB wire server on a data directory, restartable with its data.

Each raises :class:`Unavailable` (a one-line reason, for a skip) when it cannot start.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

WORKER_APP = "durabl-chaos-worker"
PRODUCER_APP = "durabl-chaos-producer"
NS_DB_ADDRESS = "10.231.0.1"
NS_WK_ADDRESS = "10.231.0.2"


class Unavailable(Exception):
    """This store cannot run here; the message says why, on one line."""


@dataclass(frozen=True)
class Target:
    """One run's store: the URLs its processes use (the same store behind each)."""

    worker_url: str
    producer_url: str
    reader_url: str
    #: The worker URL from inside the ``wk`` namespace (None: no partition possible).
    partition_url: str | None = None
    #: The command prefix that runs a process inside the ``wk`` namespace.
    partition_prefix: tuple[str, ...] = ()
    database: str = ""


def with_query(url: str, **options: str) -> str:
    extra = "&".join(f"{key}={value}" for key, value in options.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


class Store:
    name = ""

    def fresh(self) -> Target:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SqliteStore(Store):
    name = "sqlite"

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix="durabl-chaos-sqlite-")

    def fresh(self) -> Target:
        url = f"sqlite:///{self.directory}/{uuid.uuid4().hex[:8]}.db"
        return Target(url, url, url)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


@dataclass
class Namespaces:
    """Two network namespaces joined by a veth pair; nothing else gets an address."""

    db: str
    wk: str
    wk_link: str

    @classmethod
    def create(cls) -> Namespaces | None:
        if os.geteuid() != 0 or shutil.which("ip") is None:
            return None
        tag = uuid.uuid4().hex[:6]
        made = cls(f"durabl-db-{tag}", f"durabl-wk-{tag}", f"dwk{tag}")
        try:
            _ip("netns", "add", made.db)
            _ip("netns", "add", made.wk)
            _ip("link", "add", f"ddb{tag}", "type", "veth", "peer", "name", made.wk_link)
            _ip("link", "set", f"ddb{tag}", "netns", made.db)
            _ip("link", "set", made.wk_link, "netns", made.wk)
            for ns, link, address in (
                (made.db, f"ddb{tag}", NS_DB_ADDRESS),
                (made.wk, made.wk_link, NS_WK_ADDRESS),
            ):
                _ip("-n", ns, "addr", "add", f"{address}/30", "dev", link)
                _ip("-n", ns, "link", "set", link, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
        except (OSError, subprocess.SubprocessError):
            made.delete()
            return None
        return made

    def exec_prefix(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def link(self, up: bool) -> None:
        """Bring the worker side of the link up or down (a partition)."""
        _ip("-n", self.wk, "link", "set", self.wk_link, "up" if up else "down")

    def delete(self) -> None:
        for ns in (self.wk, self.db):  # removing a namespace removes its end of the pair
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True, timeout=20)


class PostgresStore(Store):
    name = "postgres"

    def __init__(self) -> None:
        from tests.postgres.server import NoServerError, ThrowawayServer, find_bindir, free_port

        bindir = find_bindir()
        if bindir is None:
            raise Unavailable("no PostgreSQL binaries (initdb, pg_ctl)")
        if os.geteuid() != 0:
            raise Unavailable("the campaign's cluster runs as the postgres user: run as root")
        import pwd

        owner = pwd.getpwnam("postgres")
        directory = tempfile.mkdtemp(prefix="durabl-chaos-pg-")
        os.chmod(directory, 0o755)
        os.chown(directory, owner.pw_uid, owner.pw_gid)
        self.namespaces = Namespaces.create()
        runuser = ["runuser", "-u", "postgres", "--"]
        prefix = runuser
        listen = "127.0.0.1"
        if self.namespaces is not None:
            prefix = [*self.namespaces.exec_prefix(self.namespaces.db), *runuser]
            listen = NS_DB_ADDRESS
        self.server = ThrowawayServer(directory, bindir, free_port(), prefix)
        self._databases = 0
        try:
            self.server.run(
                "initdb",
                *("-D", self.server.data, "-U", "postgres", "--auth=trust", "-E", "UTF8"),
                *("--no-sync", "--no-instructions"),
            )
            with open(os.path.join(self.server.data, "pg_hba.conf"), "a", encoding="utf-8") as hba:
                hba.write(f"host all all {NS_WK_ADDRESS}/32 trust\n")  # the namespaced worker
            # Commits are synchronous: a killed server must keep what it acknowledged
            # (fsync stays off: the machine itself does not crash here).
            options = (
                f"-p {self.server.port} -c listen_addresses={listen} -k {directory} "
                "-c fsync=off -c synchronous_commit=on -c full_page_writes=off "
                "-c max_connections=300"
            )
            self.server.run(
                "pg_ctl",
                *("-D", self.server.data, "-o", options),
                *("-l", os.path.join(directory, "server.log"), "-w", "-t", "30", "start"),
            )
        except NoServerError as exc:
            self.close()
            raise Unavailable(str(exc)) from None

    def create_database(self) -> str:
        import psycopg

        self._databases += 1
        name = f"chaos_{self._databases}_{uuid.uuid4().hex[:6]}"
        admin = (
            f"postgresql://postgres@/postgres?host={self.server.directory}&port={self.server.port}"
        )
        with psycopg.connect(admin, autocommit=True, connect_timeout=10) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def socket_url(self, database: str) -> str:
        return (
            f"postgresql://postgres@/{database}?host={self.server.directory}"
            f"&port={self.server.port}"
        )

    def fresh(self) -> Target:
        database = self.create_database()
        url = self.socket_url(database)
        partition_url = None
        prefix: tuple[str, ...] = ()
        if self.namespaces is not None:
            partition_url = (
                f"postgresql://postgres@{NS_DB_ADDRESS}:{self.server.port}/{database}"
                f"?application_name={WORKER_APP}"
            )
            prefix = tuple(self.namespaces.exec_prefix(self.namespaces.wk))
        return Target(
            with_query(url, application_name=WORKER_APP),
            with_query(url, application_name=PRODUCER_APP),
            url,
            partition_url,
            prefix,
            database,
        )

    def close(self) -> None:
        self.server.stop()
        if self.namespaces is not None:
            self.namespaces.delete()


@dataclass
class Bouncer:
    """A PgBouncer process in transaction mode in front of a cluster's Unix socket."""

    executable: str
    directory: str
    port: int
    config: str
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        from tests.postgres.server import START_TIMEOUT

        self.process = subprocess.Popen(
            [self.executable, self.config],
            user="postgres",
            group="postgres",
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        import psycopg

        from durabl.testing import wait_until

        def answers() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise Unavailable(f"pgbouncer exited with {self.process.returncode}")
            try:
                psycopg.connect(
                    f"postgresql://postgres@127.0.0.1:{self.port}/postgres", connect_timeout=2
                ).close()
            except psycopg.Error:
                return False
            return True

        wait_until(answers, timeout=START_TIMEOUT)

    def halt(self) -> None:
        """SIGTERM: PgBouncer ends at once, cutting every client and server connection."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.process = None


class PgBouncerStore(Store):
    name = "pgbouncer"

    def __init__(self, postgres: PostgresStore) -> None:
        from tests.postgres.server import free_port

        executable = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not os.access(executable, os.X_OK):
            raise Unavailable(
                "pgbouncer is not installed (apt-get install --no-install-recommends pgbouncer)"
            )
        self.postgres = postgres
        directory = tempfile.mkdtemp(prefix="durabl-chaos-bouncer-")
        os.chmod(directory, 0o777)
        port = free_port()
        config = os.path.join(directory, "pgbouncer.ini")
        with open(os.path.join(directory, "users.txt"), "w", encoding="utf-8") as users:
            users.write('"postgres" ""\n')
        server = postgres.server
        with open(config, "w", encoding="utf-8") as ini:
            ini.write(
                "[databases]\n"
                f"* = host={server.directory} port={server.port}\n"
                "[pgbouncer]\n"
                f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
                f"auth_type = trust\nauth_file = {directory}/users.txt\n"
                "pool_mode = transaction\nmax_client_conn = 500\ndefault_pool_size = 40\n"
                f"logfile = {directory}/pgbouncer.log\npidfile = {directory}/pgbouncer.pid\n"
                "ignore_startup_parameters = extra_float_digits,options\n"
                "server_login_retry = 1\n"
            )
        self.bouncer = Bouncer(executable, directory, port, config)
        try:
            self.bouncer.start()
        except (OSError, Unavailable) as exc:
            self.bouncer.halt()
            raise Unavailable(f"pgbouncer did not start: {exc}") from None

    def fresh(self) -> Target:
        database = self.postgres.create_database()
        url = (
            f"postgresql://postgres@127.0.0.1:{self.bouncer.port}/{database}"
            "?prepare_threshold=none&listen_notify=false"
        )
        return Target(
            with_query(url, application_name=WORKER_APP),
            with_query(url, application_name=PRODUCER_APP),
            self.postgres.socket_url(database),
            database=database,
        )

    def close(self) -> None:
        self.bouncer.halt()
        shutil.rmtree(self.bouncer.directory, ignore_errors=True)


class MongoStore(Store):
    name = "mongodb"

    def __init__(self) -> None:
        from tests.mongo_server import DiskWireServer, NoServerError

        try:
            self.server = DiskWireServer.start()
        except NoServerError as exc:
            raise Unavailable(str(exc)) from None

    def fresh(self) -> Target:
        database = f"chaos_{uuid.uuid4().hex[:8]}"
        base = urlunsplit(urlsplit(self.server.url)._replace(path=f"/{database}"))
        return Target(
            with_query(base, appName=WORKER_APP),
            with_query(base, appName=PRODUCER_APP),
            base,
            database=database,
        )

    def close(self) -> None:
        self.server.stop()


def open_store(name: str, opened: dict[str, Any]) -> Store:
    """The store ``name``, started once and kept in ``opened`` (the campaign's servers)."""
    if name not in opened:
        try:
            if name == "sqlite":
                opened[name] = SqliteStore()
            elif name == "postgres":
                opened[name] = PostgresStore()
            elif name == "pgbouncer":
                postgres = open_store("postgres", opened)
                assert isinstance(postgres, PostgresStore)
                opened[name] = PgBouncerStore(postgres)
            elif name == "mongodb":
                opened[name] = MongoStore()
            else:
                raise ValueError(f"unknown store {name!r}")
        except Unavailable as exc:
            opened[name] = exc
    found = opened[name]
    if isinstance(found, Unavailable):
        raise found
    assert isinstance(found, Store)
    return found


def close_stores(opened: dict[str, Any]) -> None:
    for name in ("pgbouncer", "sqlite", "mongodb", "postgres"):
        store = opened.pop(name, None)
        if isinstance(store, Store):
            store.close()
