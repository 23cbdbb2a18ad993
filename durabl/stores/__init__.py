"""The stores: the Backend protocol and store base (``base``), and one package per store
(memory, SQLite, MongoDB). A store imports the model, never the runtime or another store."""
