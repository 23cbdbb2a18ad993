"""A private PostgreSQL server a test may stop and start again: the outage tests cannot
use the session's shared server, which other tests (and other engineers) depend on."""

from __future__ import annotations

import os
import time

from tests.postgres.server import ThrowawayServer


class StoppableServer:
    """A :class:`ThrowawayServer` with :meth:`go_down` and :meth:`come_back`; ``close()``
    stops it for good and removes its directory."""

    def __init__(self, server: ThrowawayServer) -> None:
        self.server = server

    @classmethod
    def start(cls) -> StoppableServer:
        """Start one, or raise :class:`tests.postgres.server.NoServerError`."""
        return cls(ThrowawayServer.start())

    @property
    def url(self) -> str:
        return self.server.url

    def go_down(self) -> float:
        """Stop the server as an operator's restart does (``-m fast``: every session gets
        ``57P01 terminating connection due to administrator command``); the monotonic time
        it was down."""
        self.server.run("pg_ctl", "-D", self.server.data, "-m", "fast", "-w", "stop")
        return time.monotonic()

    def come_back(self) -> float:
        """Start it again on the same port and data; the monotonic time it answered
        (``pg_ctl -w`` returns once the server accepts connections)."""
        server = self.server
        options = (
            f"-p {server.port} -c listen_addresses=127.0.0.1 -k {server.directory} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        log = os.path.join(server.directory, "server.log")
        server.run("pg_ctl", "-D", server.data, "-o", options, "-l", log, "-w", "start")
        return time.monotonic()

    def close(self) -> None:
        self.server.stop()
