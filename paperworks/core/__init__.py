"""Shared core: params, atomic I/O, seeding, statistics, ranking metrics, reporting."""
