"""worker_memory: the write chain's workers give freed memory back to the system (each case in a fresh
interpreter, as a Python worker would be: the pool and malloc settings are process-wide)."""

import subprocess
import sys
import textwrap

import pytest

_PROGRAM = textwrap.dedent("""
    import json, sys
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    from hoodie_stream.streaming_sink import worker_memory

    def rss_mb():
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) / 1024

    enabled = sys.argv[1] == "on"
    default_backend = pa.default_memory_pool().backend_name
    worker_memory.prepare(enabled)
    rng = np.random.default_rng(0)
    before = rss_mb()
    # Arrow buffers of many sizes (as a write task's buckets and flush chunks are) and NumPy temporaries, all freed
    values = pa.array(np.arange(400_000))
    held = [pc.add(values.slice(0, int(n)), 1) for n in rng.integers(10_000, 400_000, 400)]
    held += [rng.integers(0, 1 << 30, int(n)) for n in rng.integers(10_000, 400_000, 200)]
    peak = rss_mb()
    del held
    worker_memory.release()
    print(json.dumps({"default": default_backend, "backend": pa.default_memory_pool().backend_name,
                      "before": before, "peak": peak, "after": rss_mb()}))
""")


def _run(mode):
    import json

    out = subprocess.run([sys.executable, "-c", _PROGRAM, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads RSS from /proc")
def test_freed_buffers_go_back_to_the_system():
    got = _run("on")
    assert got["backend"] == "system"
    assert got["peak"] - got["before"] > 700  # ~980 MB were allocated
    assert got["after"] - got["before"] < 20, got  # and given back after release()


def test_disabled_leaves_the_allocator_alone():
    got = _run("off")
    assert got["backend"] == got["default"]


def test_the_pool_follows_the_task_that_runs():
    """The chain's operators set the system pool, a compaction task gives pyarrow's default back, and a buffer
    allocated under one pool is freed by that pool after the switch."""
    program = textwrap.dedent("""
        import pyarrow as pa, pyarrow.compute as pc
        from hoodie_stream.streaming_sink import worker_memory
        default = pa.default_memory_pool().backend_name
        seen = []
        worker_memory.prepare(True); held = pc.add(pa.array(range(100_000)), 1); seen.append(pa.default_memory_pool().backend_name)
        worker_memory.restore(); seen.append(pa.default_memory_pool().backend_name)
        assert pc.sum(held).as_py() == sum(range(1, 100_001)); del held
        worker_memory.prepare(True); seen.append(pa.default_memory_pool().backend_name)
        worker_memory.prepare(False); seen.append(pa.default_memory_pool().backend_name)
        print(default, *seen)
    """)
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True).stdout.split()
    default = out[0]
    assert out[1:] == ["system", default, "system", default]
