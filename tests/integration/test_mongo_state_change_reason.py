"""What durabl says when MongoDB answers with a state-change error (91 ShutdownInProgress,
11600 InterruptedAtShutdown, 10107 NotWritablePrimary: a restart, a step-down), and when
the driver then keeps the server out of selection: one line naming it (``no primary: the
server is shutting down (ShutdownInProgress, code 91); waited 1.5 s for one``), never the
topology pymongo appends nor the raw reply. Before, both read "Failing command via
'failCommand' failpoint" (a real server's errmsg in its place), with no code or name.

The server's own fail point makes the errors (see :mod:`tests.integration.mongo_faults`);
the client keeps pymongo's default streaming monitor, which holds the server out of
selection for up to 10 s after such an error (``docs/operations.md``), so a second
operation with a short server selection timeout meets the timeout.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import (
    NotPrimaryError,
    OperationFailure,
    ServerSelectionTimeoutError,
    WriteConcernError,
)

from durabl import JobQueue, MongoJobQueue
from durabl.model.exceptions import BackendUnavailableError
from durabl.stores.mongo.retry import reason
from tests.integration.mongo_faults import (
    WORKER_APP,
    FailPoint,
    error,
    not_honoured,
    with_options,
)

STATE_CHANGES = [
    (91, "ShutdownInProgress", "the server is shutting down"),
    (11600, "InterruptedAtShutdown", "the server is shutting down"),
    (10107, "NotWritablePrimary", "the server is no longer primary"),
]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text and len(text) < 300, text
    assert "Topology Description" not in text and "full error" not in text, text
    return text


@pytest.mark.slow
@pytest.mark.parametrize(
    ("code", "name", "what"), STATE_CHANGES, ids=[n for _, n, _ in STATE_CHANGES]
)
def test_a_state_change_and_the_stall_after_it_are_each_one_line_naming_it(
    server: str, fail_point: FailPoint, database: str, code: int, name: str, what: str
) -> None:
    fault = error(code, 1)
    refused = not_honoured(server, fail_point, "findAndModify", fault)
    if refused is not None:
        pytest.skip(f"the server does not honour the fail point: {refused}")
    # The default (streaming) monitor, and a short wait for a server: see the docstring.
    url = with_options(server, serverSelectionTimeoutMS="1500", appName=WORKER_APP)
    client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True)
    queue = JobQueue(MongoJobQueue(client[database], owns_client=True))
    try:
        queue.register("t", lambda job, ctx: None)
        queue.enqueue("t", {})
        fail_point.set(fault, ["findAndModify"], "alwaysOn")

        with pytest.raises(BackendUnavailableError) as refused_claim:
            queue.run_pending("t", limit=1)
        assert f"no primary: {what} ({name}, code {code})" in one_line(refused_claim.value)

        with pytest.raises(BackendUnavailableError) as stalled:
            queue.run_pending("t", limit=1)  # the server is out of selection meanwhile
        text = one_line(stalled.value)
        assert f"no primary: {what} ({name}, code {code}); waited 1.5 s for one" in text
    finally:
        fail_point.off()
        queue.backend.close()


# -- the same, from the driver's errors as pymongo builds them (no server) ------------------
REPLY = {"ok": 0.0, "errmsg": "The server is in quiesce mode and will shut down", "code": 91}
REPLY["codeName"] = "ShutdownInProgress"


def test_each_form_of_a_state_change_error_reads_the_same() -> None:
    refused = NotPrimaryError(str(REPLY["errmsg"]), REPLY)
    # pymongo's server selection message: the unknown server's error, then the topology
    selection = ServerSelectionTimeoutError(
        f"{refused}, Timeout: 8.0s, Topology Description: <TopologyDescription id: 1, "
        "topology_type: ReplicaSetNoPrimary, servers: [<ServerDescription ('db1', 27017) "
        f"server_type: Unknown, rtt: None, error=NotPrimaryError({str(refused)!r})>]>"
    )
    stepped_down = OperationFailure("stepped down", 189, {"code": 189})
    shutdown = "no primary: the server is shutting down (ShutdownInProgress, code 91)"
    assert reason(refused) == shutdown
    assert reason(selection) == f"{shutdown}; waited 8.0 s for one"
    assert reason(stepped_down) == (
        "no primary: the primary stepped down (PrimarySteppedDown, code 189)"
    )
    unconfirmed = WriteConcernError("waiting for replication", 11602, {"code": 11602})
    assert reason(unconfirmed).startswith("no primary: the primary stepped down")


def test_other_errors_keep_their_own_words() -> None:
    refused = ServerSelectionTimeoutError(
        "db1:27017: [Errno 111] Connection refused, Timeout: 8.0s, Topology Description: <...>"
    )
    assert reason(refused) == "db1:27017: [Errno 111] Connection refused, Timeout: 8.0s"
    denied = OperationFailure("not authorized on app", 13, {"code": 13, "errmsg": "x"})
    assert reason(denied) == "not authorized on app (code 13)"
