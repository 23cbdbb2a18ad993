"""One module per library for ``bench/throughput.py``: durabl and the peers it is compared
with (Huey's ``SqliteHuey``, django-tasks-db's ``DatabaseBackend``; on PostgreSQL,
Procrastinate, django-tasks-db and a raw ``SKIP LOCKED`` loop), plus what they share.

Every module can be imported without its library installed: the import happens when a
measurement starts, and a missing package becomes a "skipped: ..." row.
"""
