"""The runtime: the queue front, worker pools, a claim's lifecycle, the completer,
heartbeats, the reaper and shutdown. It talks to stores only through the Backend protocol."""
