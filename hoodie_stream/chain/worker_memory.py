"""Memory hygiene of the Python workers that run the write chain and the compaction tasks.

A write task frees a bucket's rows at every flush, but freed memory does not go back to the system by itself.
pyarrow's default allocator (mimalloc) keeps the pages of freed buffers until it is told to collect, and reuses
them poorly for buffers of other sizes, so a worker's RSS climbs by ~15-20 MB per flush over what its buffers
hold; Arrow's jemalloc pool keeps ~70 MB per ~370 MB allocated and freed even after a purge; and glibc serves the
large blocks Spark's input batches arrive in from its heap once its mmap threshold has risen, and keeps them.
Measured with each pool (benchmarks/memory_bench.py, peak RSS of a worker): mimalloc 281 MB, jemalloc 255-273 MB,
glibc with a fixed mmap threshold 253 MB. So:
- `task()` wraps each of the chain's tasks and each compaction task (a compaction of a 2M-row slice peaked at 647 MB
  RSS without it, 464 MB with it, Arrow's own peak 230 MB both times): Arrow's system pool (glibc malloc) is the default pool while it runs,
  and the first time in a process glibc's mmap threshold is fixed at 1 MB (blocks of 1 MB and more are mapped,
  and unmapped as soon as they are freed);
- `release()` (after flushes, and when a task ends) trims glibc's heap and asks Arrow's pool to return what it
  still holds.
- `after_table_service()` does the same for the driver, after each round of the table services (async or inline).
Where the C library is not glibc, only the pool changes. `hoodie.stream.worker.memory.release=false` leaves the
allocators of the workers and of the driver's table services alone.
"""

import contextlib
import ctypes
import ctypes.util

import pyarrow as pa

MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h

_libc = None
_active = 0  # chain tasks running in this process (0 or 1: a worker runs one task at a time)
_threshold_set = False


def _glibc():
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc = lib if all(hasattr(lib, name) for name in ("mallopt", "malloc_trim")) else False  # glibc
        except OSError:
            _libc = False
    return _libc or None


@contextlib.contextmanager
def task(enabled=True):
    """Allocator settings for the duration of one of the chain's tasks or a compaction task. `enabled` is the sink's
    `hoodie.stream.worker.memory.release` option (off: nothing changes). The system pool is the default pool while
    the task runs and the pool it replaced is set back when it ends, so other tasks of the same worker (recovery
    scans, a user's own functions) keep pyarrow's default; each buffer is freed by the pool that
    allocated it, so buffers that outlive the task (the cached index state) are fine. glibc's mmap threshold is
    process-wide and stays fixed once set."""
    global _active, _threshold_set
    if not enabled:
        yield
        return
    fix_mmap_threshold()
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    _active += 1
    try:
        yield
    finally:
        _active -= 1
        release(force=True)
        pa.set_memory_pool(previous)


def fix_mmap_threshold():
    """Fix glibc's mmap threshold at MMAP_THRESHOLD, once per process (process-wide; glibc only)."""
    global _threshold_set
    if not _threshold_set:
        _threshold_set = True
        libc = _glibc()
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def trim():
    """Give the free pages of Arrow's default pool and of glibc's heap and arenas back to the system."""
    pa.default_memory_pool().release_unused()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def release(force=False):
    """Give the free pages of Arrow's pool and glibc's heap back to the system (inside a task only)."""
    if not (_active or force):
        return
    trim()


def after_table_service():
    """The driver's table services (compaction's plan and commit, cleaning, archiving, archive merging) read and
    write timeline files, plans and archive files of up to tens of MB (in a thread of their own when async, in the
    query's thread when inline): glibc serves each thread from an arena of its own and, once its mmap threshold has
    risen to the size of such a buffer, keeps the freed pages. Over a stream's life the driver's RSS then climbs with
    the largest archive file read. After each round of the services: the threshold fixed (as in the workers) and the
    free pages given back (a trim takes ~0.01 ms)."""
    fix_mmap_threshold()
    trim()
