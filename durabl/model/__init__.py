"""The model: job records, options, payload rules, errors, the clock and the rules every
store applies. Pure: no I/O, no store, no queue."""
