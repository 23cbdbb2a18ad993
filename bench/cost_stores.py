"""Which stores the cost-per-job benchmark counts on (``--store``, ``--url``), and the
SecantusDB wire server it starts when asked for a server and given none.

* ``mongomock``: counted through collection proxies, in process;
* ``mongodb``: a MongoDB server, counted with pymongo command monitoring: ``--url``, else
  ``MONGO_URL``, else ``secantusd-py`` from this virtualenv, started on a free port of
  127.0.0.1 (``--storage-path :memory: --enable-test-commands``) and stopped at the end;
* ``both``: the two, mongomock first.

Without ``--store``: mongomock, plus the server when ``--url`` or ``MONGO_URL`` names one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from opcount import MongomockStore, ServerStore, Store

CHOICES = ("mongomock", "mongodb", "both")


def default_choice(url: str | None) -> str:
    return "both" if url else "mongomock"


@contextmanager
def opened(choice: str, url: str | None) -> Iterator[list[Store]]:
    """The stores ``choice`` names, connected (a server that does not answer fails here,
    before the long part); each closed, and a wire server started here stopped, after."""
    with ExitStack() as cleanup:
        stores: list[Store] = []
        if choice in ("mongomock", "both"):
            stores.append(MongomockStore())
        if choice in ("mongodb", "both"):
            if url is None:
                url = cleanup.enter_context(wire_server())
            try:
                server = ServerStore(url)
            except RuntimeError as exc:
                raise SystemExit(f"cost_per_job.py: {str(exc).splitlines()[0]}") from None
            cleanup.callback(server.close)
            stores.append(server)
        yield stores


@contextmanager
def wire_server() -> Iterator[str]:
    """Start the SecantusDB wire server the test suite uses (``tests/mongo_server.py``):
    its URL, until the block ends. ``SystemExit`` with one line when it cannot start."""
    from tests.mongo_server import NoServerError, WireServer

    try:
        server = WireServer.start()
    except NoServerError as exc:
        raise SystemExit(f"cost_per_job.py: cannot start the wire server: {exc}") from None
    try:
        yield server.url
    finally:
        server.stop()
