"""Log files: the log block format (headers, data, delete and command blocks), writing and reading log files, and scanning a slice's blocks into merge versions."""
