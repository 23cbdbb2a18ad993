"""A MongoDB wire-protocol server for the test session: SecantusDB, in a process of its own.

Used when ``MONGO_URL`` is unset (see ``tests/conftest.py``). SecantusDB is a test tool,
GPL-2.0, installed by the ``test`` extra and never imported: it runs as
``secantusd-py --port P --storage-path :memory: --enable-test-commands`` on a free port of
127.0.0.1 and answers as a one-node replica set named ``secantus`` (change streams and
transactions need one; ``configureFailPoint`` needs the test commands). It idles at a
large share of a core, so it runs for the test session only: :meth:`WireServer.stop` ends it.
``docs/testing.md`` says what a run on it proves and what only a real ``mongod`` can.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO

START_TIMEOUT = 30.0
EXECUTABLE = "secantusd-py"


class NoServerError(Exception):
    """No wire server can be started here (the message says why, on one line)."""


def find_executable() -> str | None:
    """``secantusd-py`` beside this interpreter (the project's virtualenv), else on $PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), EXECUTABLE)
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which(EXECUTABLE)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class WireServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: str
    _log: IO[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?replicaSet=secantus"

    @classmethod
    def start(cls) -> WireServer:
        """Start one and wait until it answers ``ping`` as a replica set's primary, or raise
        :class:`NoServerError`."""
        executable = find_executable()
        if executable is None:
            raise NoServerError(
                f"{EXECUTABLE} not found: install the test extra (pip install -e '.[test]')"
            )
        port = free_port()
        log_path = os.path.join(tempfile.mkdtemp(prefix="durabl-wire-"), "server.log")
        log = open(log_path, "wb")  # noqa: SIM115 - closed by stop()
        process = subprocess.Popen(
            [
                executable,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--storage-path",
                ":memory:",
                "--enable-test-commands",
                "--log-level",
                "WARNING",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # a Ctrl-C to pytest does not reach it first
        )
        server = cls(process, port, log_path, log)
        try:
            server.wait_ready()
        except NoServerError:
            server.stop()
            raise
        return server

    def wait_ready(self) -> None:
        from pymongo import MongoClient
        from pymongo.errors import PyMongoError

        deadline = time.monotonic() + START_TIMEOUT
        last = "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NoServerError(
                    f"{EXECUTABLE} exited with {self.process.returncode}: {self.last_log_line()}"
                )
            client: MongoClient[dict[str, object]] = MongoClient(
                self.url, serverSelectionTimeoutMS=500, connectTimeoutMS=500
            )
            try:
                client.admin.command("ping")
                return
            except PyMongoError as exc:
                last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            finally:
                client.close()
            time.sleep(0.1)  # a child process starting: nothing to wait on but the port
        raise NoServerError(f"{EXECUTABLE} did not answer in {START_TIMEOUT:.0f} s: {last}")

    def last_log_line(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                lines = log.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1] if lines else "(empty log)"

    def stop(self) -> None:
        """End the server (its data is in memory and goes with it) and remove its log."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()
        shutil.rmtree(os.path.dirname(self.log_path), ignore_errors=True)


@dataclass
class DiskWireServer:
    """A wire server on a data directory of its own, for the fault campaign (tests/chaos):
    it can be stopped, killed and started again on the same port with its data (each
    commit synced, so a SIGKILL loses nothing it acknowledged). :meth:`stop` ends it for
    good and removes the directory."""

    directory: str
    port: int
    current: WireServer | None = None

    @property
    def url(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/?replicaSet=secantus"

    @classmethod
    def start(cls) -> DiskWireServer:
        """Start one on a fresh directory, or raise :class:`NoServerError`."""
        server = cls(tempfile.mkdtemp(prefix="durabl-wire-disk-"), free_port())
        try:
            server.launch()
        except NoServerError:
            server.stop()
            raise
        return server

    def launch(self) -> None:
        """Start the server process on the directory and wait until it answers."""
        executable = find_executable()
        if executable is None:
            raise NoServerError(
                f"{EXECUTABLE} not found: install the test extra (pip install -e '.[test]')"
            )
        log_path = os.path.join(self.directory, "server.log")
        log = open(log_path, "ab")  # noqa: SIM115 - closed by halt()
        process = subprocess.Popen(
            [
                executable,
                *("--host", "127.0.0.1", "--port", str(self.port)),
                *("--storage-path", os.path.join(self.directory, "data")),
                "--sync-on-commit",
                "--enable-test-commands",
                *("--log-level", "WARNING"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.current = WireServer(process, self.port, log_path, log)
        self.current.wait_ready()

    @property
    def pid(self) -> int | None:
        running = self.current
        return running.process.pid if running and running.process.poll() is None else None

    def halt(self, *, kill: bool = False) -> None:
        """End the server process (SIGTERM, or SIGKILL when ``kill``); the data stays."""
        running, self.current = self.current, None
        if running is None:
            return
        if running.process.poll() is None:
            if kill:
                running.process.kill()
            else:
                running.process.terminate()
            try:
                running.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                running.process.kill()
                running.process.wait(timeout=10)
        running._log.close()

    def restart(self, *, kill: bool = False) -> None:
        """:meth:`halt`, then :meth:`launch` again on the same port and data."""
        self.halt(kill=kill)
        self.launch()

    def stop(self) -> None:
        """End the server and remove its directory."""
        self.halt()
        shutil.rmtree(self.directory, ignore_errors=True)
