"""The PostgreSQL backend: the whole contract on a server, on psycopg 3 and psycopg-pool
(the ``durabl[postgres]`` extra). The only place that imports psycopg."""

from __future__ import annotations

from durabl.stores.postgres.backend import PostgresJobQueue

__all__ = ["PostgresJobQueue"]
