"""Benchmarks for django-leasejobs (not part of the package or the test suite)."""
