"""Key groups: a record key's group is `pmod(xxhash64(key), key groups)` (Spark's xxhash64, seed 42), and key groups
go to the bucket-assign tasks in contiguous ranges, as Flink's KeyGroupRangeAssignment. The index state is stored by
key group, so the key-group function must never change."""

from .columns import KEY
from .task_tags import task_tags


def operator_index(key_group, key_groups, num_tasks):
    """The bucket-assign task of a key group (Flink's KeyGroupRangeAssignment)."""
    return key_group * num_tasks // key_groups


def key_group_expr(key_groups, column=KEY):
    """Spark SQL: the key group of the record key in `column`."""
    return key_group_of(key_groups, f"`{column}`")


def key_group_of(key_groups, key_sql):
    """Spark SQL: the key group of the record key that the SQL expression `key_sql` gives."""
    return f"cast(pmod(xxhash64({key_sql}), {key_groups}) as int)"


def assign_task_expr(key_groups, num_tasks, key_group_sql=None):
    """Spark SQL: the task tag of a row's key group (`key_group_sql`, by default that of the KEY column), for
    `repartition(num_tasks, ...)`."""
    tags = task_tags(num_tasks)
    by_group = ", ".join(str(tags[operator_index(kg, key_groups, num_tasks)]) for kg in range(key_groups))
    return f"element_at(array({by_group}), {key_group_sql or key_group_expr(key_groups)} + 1)"
