"""Runtime utilities: counters, atomics, mutexes, Print, Assert, stats, the Python op."""
