"""Shared pytest configuration: the `slow` marker holds the exhaustive sweeps."""
