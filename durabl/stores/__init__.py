"""The stores: the Backend protocol (``base``), the store-neutral operations written once
above every store (``engine``), and one package per store: memory, MongoDB, and the SQL
store (``sql``) with its two dialects, SQLite and PostgreSQL. A store imports the model,
never the runtime or another store's package."""
