"""Tags that send a row to a chosen Spark task.

`df.repartition(n, column)` places a row on partition `pmod(Murmur3Hash(column), n)` (Spark's hash partitioning,
seed 42). The tag of task t is the smallest non-negative int that this places on partition t, so a stage that
writes `tags[t]` into a column and repartitions by it decides exactly which task of the next stage gets the row.
"""

_SPARK_SEED = 42
_M32 = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


def spark_hash_int(value, seed=_SPARK_SEED):
    """Spark's `Murmur3Hash` of one non-null int column (Murmur3_x86_32.hashInt), as a signed 32-bit int."""
    k1 = (value & _M32) * 0xCC9E2D51 & _M32
    k1 = _rotl(k1, 15) * 0x1B873593 & _M32
    h1 = _rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _M32
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M32
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def task_tags(num_tasks):
    """tags[t]: the smallest non-negative int that Spark's hash partitioning into `num_tasks` puts on partition t."""
    tags = [None] * num_tasks
    value, left = 0, num_tasks
    while left:
        task = spark_hash_int(value) % num_tasks
        if tags[task] is None:
            tags[task] = value
            left -= 1
        value += 1
    return tags
