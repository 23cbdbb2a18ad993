"""The SQL store, written once for SQLite and PostgreSQL: every operation's flow
(:mod:`~durabl.stores.sql.store`, :mod:`~durabl.stores.sql.writes`) over the statements a
dialect names (:mod:`~durabl.stores.sql.statements`). Imports no database driver."""
