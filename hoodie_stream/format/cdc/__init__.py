"""Changelog (Hudi's CDC query): the changes of a window read from logged `.cdc` files or inferred, the `.cdc` files a write logs, and the JSON images."""
