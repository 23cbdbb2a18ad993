"""The fault campaign: a workload over real processes, faults injected into the store, the
network and the workers, a history recorded outside the store, and a checker of the
invariants durabl promises (docs/reliability.md)."""
