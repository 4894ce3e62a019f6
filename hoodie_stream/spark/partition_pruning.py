"""Partition pruning: which partitions of a table can hold rows that pass the filters Spark pushed down.

Pruning is conservative: a partition is dropped only when its path proves that none of its rows can pass a filter
on a partition column. The path is compared with the filter's literal rendered by the table's own key generator
(`SimpleKeyGenerator` / `ComplexKeyGenerator`: the partition path of a row is a function of its partition column
values), so `city = 'são luís'` finds the partition exactly as the writer named it (URL-encoded or not). Range
filters (`<`, `<=`, `>`, `>=`, `LIKE 'x%'`) are decided on string and integer columns (on the decoded path of a
URL-encoded table). Anything else keeps the partition: other key generators (timestamp-based, custom), the default
partition (`__HIVE_DEFAULT_PARTITION__`: null or empty values), `NOT`, `IS NULL`, literals that do not convert to
the column's type, floating-point columns (Spark's `0.0 = -0.0` holds, their paths differ). The filters are still
handed back to Spark, which applies them to the rows read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    StringStartsWith,
)

from ..format.record.keygen import DEFAULT_PARTITION_PATH, ComplexKeyGenerator, KeyGenerator, SimpleKeyGenerator

_RANGES: dict[type, Callable[[Any, Any], bool]] = {
    GreaterThan: lambda v, lit: v > lit,
    GreaterThanOrEqual: lambda v, lit: v >= lit,
    LessThan: lambda v, lit: v < lit,
    LessThanOrEqual: lambda v, lit: v <= lit,
}


class PartitionPruner:
    """Decides from the pushed filters whether a partition path may hold matching rows."""

    def __init__(self, keygen: KeyGenerator, schema: pa.Schema, filters: Sequence[Filter]) -> None:
        self.keygen = keygen
        self.fields = list(keygen.partition_fields)
        self.schema = schema
        usable = type(keygen) in (SimpleKeyGenerator, ComplexKeyGenerator) and all(
            f in schema.names for f in self.fields
        )
        # (level index, filter) for each filter on one partition column
        self.filters = []
        for f in filters if usable else ():
            column: tuple[str, ...] = getattr(
                f, "attribute", ()
            )  # every filter but Not names one column: ("a",) or ("a", "b")
            if len(column) == 1 and column[0] in self.fields:
                self.filters.append((self.fields.index(column[0]), f))

    @property
    def active(self) -> bool:
        return bool(self.filters)

    def keep(self, partition: str) -> bool:
        """False only when `partition` provably holds no row that passes every filter."""
        if not self.filters:
            return True
        levels = partition.split("/")
        if len(levels) != len(self.fields):
            return True  # not a path this key generator writes: keep it
        return all(self._may_match(levels[i], self.fields[i], f) for i, f in self.filters)

    def _may_match(self, level: str, field: str, f: Filter) -> bool:
        value = level[len(field) + 1 :] if self.keygen.hive_style and level.startswith(field + "=") else level
        if value == DEFAULT_PARTITION_PATH:
            return True
        literal = getattr(f, "value", None)
        if isinstance(f, (EqualTo, EqualNullSafe, In)):
            rendered = self._rendered(field, list(literal or ()) if isinstance(f, In) else [literal])
            return rendered is None or level in rendered
        column_type = self.schema.field(field).type
        if self.keygen.url_encode and "%" in value:
            value = unquote(value)
        compare = _RANGES.get(type(f))
        if compare is not None:
            if pa.types.is_string(column_type) and isinstance(literal, str):
                return compare(value, literal)
            if pa.types.is_integer(column_type) and isinstance(literal, int) and not isinstance(literal, bool):
                try:
                    return compare(int(value), literal)
                except ValueError:
                    return True
            return True
        if isinstance(f, StringStartsWith) and pa.types.is_string(column_type) and isinstance(literal, str):
            return value.startswith(literal)
        return True

    def _rendered(self, field: str, literals: list) -> set[str] | None:
        """The partition path levels rows with these values of `field` are written to; None when the literals
        do not convert to the column's type (then nothing is decided)."""
        if any(v is None for v in literals):
            return None
        column_type = self.schema.field(field).type
        if pa.types.is_floating(column_type):  # 0.0 = -0.0 (and NaN = NaN) in Spark: several paths, one value
            return None
        try:
            values = pa.array(literals).cast(column_type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError):
            return None
        level_keygen = SimpleKeyGenerator(
            self.keygen.record_key_fields[:1],
            [field],
            hive_style=self.keygen.hive_style,
            url_encode=self.keygen.url_encode,
            consistent_logical_timestamp=self.keygen.consistent_logical_timestamp,
        )
        try:
            return set(level_keygen.partition_paths(pa.table({field: values})).to_pylist())
        except Exception:  # a value the key generator refuses: decide nothing
            return None
