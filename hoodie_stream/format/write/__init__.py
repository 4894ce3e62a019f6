"""Writing: the write handles (base files and log blocks), the transaction of one commit, and rolling back a failed one."""
