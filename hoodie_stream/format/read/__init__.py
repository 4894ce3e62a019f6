"""Queries: the table reader (snapshot, read-optimized, incremental, time travel) and the checks of what an instant reaches."""
