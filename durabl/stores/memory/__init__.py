"""The in-memory stores: MemoryBackend, DummyBackend, ImmediateBackend."""
