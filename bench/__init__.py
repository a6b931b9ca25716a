"""Benchmarks and the soak test (not part of `make test`)."""
