"""Console entry points: demo, benchmarks, parity check (and later the offline runner)."""
