"""worker_memory: while one of the write chain's tasks runs, freed memory goes back to the system, and the worker's
allocator is as before once the task ends (each case in a fresh interpreter, as a Python worker would be: the pool
and malloc settings are process-wide)."""

import json
import subprocess
import sys
import textwrap

import pytest

_PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from hoodie_stream.chain import worker_memory

    def rss_mb():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

    enabled = sys.argv[1] == "on"
    default_backend = pa.default_memory_pool().backend_name
    rng = np.random.default_rng(0)
    values = pa.array(np.arange(400_000))
    before = rss_mb()
    with worker_memory.task(enabled):
        backend = pa.default_memory_pool().backend_name
        # Arrow buffers of many sizes (as a write task's buckets and flush chunks are) and NumPy temporaries
        held = [pc.add(values.slice(0, int(n)), 1) for n in rng.integers(10_000, 400_000, 400)]
        held += [rng.integers(0, 1 << 30, int(n)) for n in rng.integers(10_000, 400_000, 200)]
        peak = rss_mb()
        del held
        worker_memory.release()
        during = rss_mb()
    print(json.dumps({"default": default_backend, "backend": backend, "after_task": pa.default_memory_pool().backend_name,
                      "before": before, "peak": peak, "released": during}))
""")


def _run(mode):
    out = subprocess.run([sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc")
def test_freed_buffers_go_back_to_the_system_during_a_task():
    got = _run("on")
    assert got["backend"] == "system"
    assert got["peak"] - got["before"] > 700  # ~980 MB were allocated
    assert got["released"] - got["before"] < 20, got  # and given back by release()
    assert got["after_task"] == got["default"]  # the task's end sets pyarrow's pool back


def test_disabled_leaves_the_allocator_alone():
    got = _run("off")
    assert got["backend"] == got["after_task"] == got["default"]


def test_buffers_outlive_the_task_that_allocated_them():
    """A buffer allocated during a task (e.g. the cached index state) stays valid after the pool is set back, and
    nested tasks restore what they replaced."""
    program = textwrap.dedent("""
        import pyarrow as pa, pyarrow.compute as pc
        from hoodie_stream.chain import worker_memory
        seen = [pa.default_memory_pool().backend_name]
        with worker_memory.task():
            kept = pc.add(pa.array(range(100_000)), 1)
            with worker_memory.task():
                seen.append(pa.default_memory_pool().backend_name)
            seen.append(pa.default_memory_pool().backend_name)
        seen.append(pa.default_memory_pool().backend_name)
        assert pc.sum(kept).as_py() == sum(range(1, 100_001))
        del kept
        print(*seen)
    """)
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()
    assert out[1:3] == ["system", "system"] and out[3] == out[0] != "system"


_SERVICE_ROUNDS = textwrap.dedent("""
    import json, sys, threading
    from hoodie_stream.chain import worker_memory

    def rss_mb():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

    kept = []  # what a round keeps (its log lines, a completed instant's record): allocated after its big buffer

    def service_round(size_mb):
        # an archive file read whole, decoded and dropped, as archiving and archive merging do
        data = b"x" * (size_mb << 20)
        kept.append(b"y" * 2000)
        del data
        if sys.argv[1] == "on":
            worker_memory.after_table_service()

    before = rss_mb()
    # a new thread per round, as the sink's service thread ends when idle; the largest buffer comes first (once
    # freed, it raises glibc's mmap threshold: the smaller ones that follow are served from the arena)
    for size_mb in (26, 24, 20, 22, 16, 24, 18):
        thread = threading.Thread(target=service_round, args=(size_mb,))
        thread.start()
        thread.join()
    print(json.dumps({"before": before, "after": rss_mb()}))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc")
def test_the_driver_table_services_give_freed_buffers_back_after_each_round():
    """The driver's service thread reads buffers that grow over a stream's life (the newest archive file, up to the
    small-file limit). glibc's mmap threshold rises to the largest buffer freed, later ones come from the thread's
    arena and stay in the driver's RSS; after_table_service() after each round keeps them out."""
    off = json.loads(subprocess.run([sys.executable, "-c", _SERVICE_ROUNDS, "off"], capture_output=True, text=True,
                                    check=True).stdout)  # fmt: skip
    on = json.loads(subprocess.run([sys.executable, "-c", _SERVICE_ROUNDS, "on"], capture_output=True, text=True,
                                   check=True).stdout)  # fmt: skip
    assert off["after"] - off["before"] > 20, off  # the case: without it, the largest buffer stays resident
    assert on["after"] - on["before"] < 8, on
