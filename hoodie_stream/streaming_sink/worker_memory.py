"""Memory hygiene of the Python workers that run the write chain.

A write task frees a bucket's rows at every flush, but freed memory does not go back to the system by itself.
pyarrow's default allocator (mimalloc) keeps the pages of freed buffers until it is told to collect, and reuses
them poorly for buffers of other sizes, so a worker's RSS climbs by ~15-20 MB per flush over what its buffers
hold; Arrow's jemalloc pool keeps ~70 MB per ~370 MB allocated and freed even after a purge; and glibc serves the
large blocks Spark's input batches arrive in from its heap once its mmap threshold has risen, and keeps them.
Measured with each pool (benchmarks/memory_bench.py, peak RSS of a worker): mimalloc 281 MB, jemalloc 255-273 MB,
glibc with a fixed mmap threshold 253 MB. So:
- `prepare()` (once per worker process, before the chain's first allocation) makes Arrow's system pool (glibc
  malloc) the default pool and fixes glibc's mmap threshold at 1 MB: blocks of 1 MB and more are mapped, and
  unmapped as soon as they are freed;
- `release()` (after flushes, at the end of a task) trims glibc's heap and asks Arrow's pool to return what it
  still holds;
- `restore()` (a compaction task's start) sets pyarrow's default pool back: a worker runs one task at a time, and
  a buffer is always freed by the pool that allocated it, so the pool can change from task to task.
Buffers allocated before `prepare()` stay with the pool that allocated them. Where the C library is not glibc,
only the pool changes. `hoodie.stream.worker.memory.release=false` leaves the workers' allocators alone (for
workers shared with other pyarrow code that wants Arrow's default pool).
"""

import ctypes
import ctypes.util

import pyarrow as pa

MMAP_THRESHOLD = 1 << 20
_M_MMAP_THRESHOLD = -3  # mallopt parameter number in glibc's malloc.h

_libc = None
_prepared = False
_enabled = True
_default_pool = None  # pyarrow's default pool, as found by the first prepare()


def _glibc():
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc = lib if all(hasattr(lib, name) for name in ("mallopt", "malloc_trim")) else False  # glibc
        except OSError:
            _libc = False
    return _libc or None


def prepare(enabled=True):
    """Called by each operator of the chain as its task starts; `enabled` is the sink's
    `hoodie.stream.worker.memory.release` option (off: the worker's allocators are left as pyarrow and glibc set
    them)."""
    global _prepared, _enabled, _default_pool
    _enabled = enabled
    if not enabled:
        if _default_pool is not None:
            pa.set_memory_pool(_default_pool)
        return
    if not _prepared:
        _prepared = True
        _default_pool = pa.default_memory_pool()
        libc = _glibc()
        if libc is not None:
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    pa.set_memory_pool(pa.system_memory_pool())


def restore():
    """Give pyarrow its own default pool back for the task that starts (a compaction task in a worker the chain
    prepared: its large merges reuse freed pages, which the system pool does not)."""
    if _default_pool is not None:
        pa.set_memory_pool(_default_pool)


def release():
    if not _enabled:
        return
    pa.default_memory_pool().release_unused()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
