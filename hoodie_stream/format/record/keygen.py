"""Hudi key generators (record key and partition path), vectorized over Arrow tables.

Values are rendered as Hudi's Avro key generators render them (HoodieAvroUtils.getNestedFieldValAsString):
integers in decimal, booleans true/false, strings as-is, dates yyyy-MM-dd, decimals as BigDecimal.toString,
floats as Java Float/Double.toString, timestamps as the raw epoch number of the Avro timestamp-micros value
(or java.sql.Timestamp text in UTC with consistent logical timestamps enabled). Binary and nested values are
rejected. TimestampBasedKeyGenerator parses and formats times with Java's date patterns (java_date_format).
"""

import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieConfigError, HoodieKeyError
from ..util.java_date_format import (
    fix_far_future,
    format_epoch_ms,
    format_tokens,
    format_wall_clock,
    java_zone,
    local_to_epoch,
    parse_date_strings,
    parse_regex,
)
from ..util.string_buffers import constant_strings

DEFAULT_PARTITION_PATH = "__HIVE_DEFAULT_PARTITION__"
NULL_PLACEHOLDER = "__null__"
EMPTY_PLACEHOLDER = "__empty__"

# Hive FileUtils escape set used by PartitionPathEncodeUtils.escapePathName
_ESCAPED = [chr(c) for c in range(0x20)] + list("\"#%'*/:=?\\\x7f{[]^")
_ESCAPE_CLASS = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in _ESCAPED) + "]"


# ---------------------------------------------------------------- value rendering


def field_column(table, field):
    """Column for a (possibly dotted, nested) field name as one Arrow array."""
    parts = field.split(".")
    if parts[0] not in table.column_names:
        raise HoodieKeyError(f"key field {field!r} does not exist in the input records")
    col = table[parts[0]]
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    for part in parts[1:]:
        if not pa.types.is_struct(col.type) or col.type.get_field_index(part) < 0:
            raise HoodieKeyError(f"key field {field!r} does not exist in the input records")
        parent_valid = col.is_valid()
        col = pc.if_else(parent_valid, pc.struct_field(col, part), pa.scalar(None, col.type.field(part).type))
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col


def java_double_str(x, single=False):
    """Java Double.toString / Float.toString (shortest round-trip digits)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1.0, x) < 0 else "0.0"
    v = np.float32(x) if single else np.float64(x)
    if 1e-3 <= abs(x) < 1e7:
        return np.format_float_positional(v, unique=True, trim="0")
    mantissa, exp = np.format_float_scientific(v, unique=True, trim="0").split("e")
    return f"{mantissa}E{int(exp)}"


def _java_timestamp_str(col):
    """java.sql.Timestamp.toString of the value truncated to milliseconds, in UTC."""
    ms = col.cast(pa.timestamp("ms", tz=col.type.tz), safe=False).cast(pa.int64())
    frac = np.asarray(ms.fill_null(0).to_numpy(zero_copy_only=False), np.int64) % 1000
    frac = pc.utf8_rtrim(pc.utf8_lpad(pa.array(frac).cast(pa.string()), 3, "0"), "0")
    frac = pc.if_else(pc.equal(frac, ""), "0", frac)
    seconds = pa.array(
        np.asarray(ms.fill_null(0).to_numpy(zero_copy_only=False), np.int64) // 1000, pa.timestamp("s", tz="UTC")
    )
    text = pc.binary_join_element_wise(pc.strftime(seconds, format="%Y-%m-%d %H:%M:%S"), frac, ".")
    return pc.if_else(col.is_null(), pa.scalar(None, pa.string()), text)


def value_strings(table, field, consistent_logical_timestamp=False):
    """String rendering of one key field, nulls kept as nulls."""
    col = field_column(table, field)
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return col.cast(pa.string())
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t) or pa.types.is_date32(t):
        return col.cast(pa.string())
    if pa.types.is_date64(t):
        return col.cast(pa.date32()).cast(pa.string())
    if pa.types.is_floating(t):
        single = t.bit_width <= 32
        return pa.array([None if v is None else java_double_str(v, single) for v in col.to_pylist()], pa.string())
    if pa.types.is_timestamp(t):
        if consistent_logical_timestamp:
            return _java_timestamp_str(col)
        return col.cast(pa.timestamp("us", tz=t.tz), safe=False).cast(pa.int64()).cast(pa.string())
    raise HoodieKeyError(f"key field {field!r} has type {t}, which cannot be used in a record key or partition path")


def _first_bad(mask):
    return int(np.flatnonzero(np.asarray(mask.to_numpy(zero_copy_only=False)))[0])


def _null_or_empty(values):
    return pc.fill_null(pc.equal(pc.utf8_length(values), 0), True)


# ---------------------------------------------------------------- partition path helpers


def escape_path_values(values):
    """PartitionPathEncodeUtils.escapePathName on each value (Hive escape set, %XX upper-case hex)."""
    if len(values) == 0 or not pc.any(pc.fill_null(pc.match_substring_regex(values, _ESCAPE_CLASS), False)).as_py():
        return values
    ordered = ["%"] + [c for c in _ESCAPED if c != "%"]
    for c in ordered:
        if pc.any(pc.fill_null(pc.match_substring(values, c), False)).as_py():
            values = pc.replace_substring(values, c, f"%{ord(c):02X}")
    return values


def _partition_part(values, field, hive_style, url_encode):
    """One partition level: null/empty -> default partition, optional escaping, optional field= prefix."""
    missing = _null_or_empty(values)
    if url_encode:
        values = escape_path_values(values)
    values = pc.if_else(missing, DEFAULT_PARTITION_PATH, values)
    if hive_style:
        values = pc.binary_join_element_wise(field + "=", values, "")
    return values


def _join(parts, sep, n):
    if not parts:
        return constant_strings("", n)
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, sep)


# ---------------------------------------------------------------- key generators


class KeyGenerator:
    """Base key generator: record keys per the number of key fields, partition path per field list."""

    class_name: str | None = None

    def __init__(
        self,
        record_key_fields,
        partition_fields=(),
        hive_style=False,
        url_encode=False,
        consistent_logical_timestamp=False,
    ):
        self.record_key_fields = [f.strip() for f in record_key_fields if f and f.strip()]
        self.partition_fields = [f.strip() for f in partition_fields if f and f.strip()]
        self.hive_style = hive_style
        self.url_encode = url_encode
        self.consistent_logical_timestamp = consistent_logical_timestamp
        if not self.record_key_fields:
            raise HoodieConfigError(f"{type(self).__name__} needs at least one record key field")

    def _values(self, table, field):
        return value_strings(table, field, self.consistent_logical_timestamp)

    def _simple_keys(self, table):
        field = self.record_key_fields[0]
        values = self._values(table, field)
        bad = _null_or_empty(values)
        if len(values) and pc.any(bad).as_py():
            row = _first_bad(bad)
            raise HoodieKeyError(f"record key field {field!r} is null or empty at row {row}")
        return values

    def _complex_keys(self, table):
        parts, all_missing = [], None
        for field in self.record_key_fields:
            values = self._values(table, field)
            missing = _null_or_empty(values)
            shown = pc.if_else(pc.is_null(values), NULL_PLACEHOLDER, pc.if_else(missing, EMPTY_PLACEHOLDER, values))
            parts.append(pc.binary_join_element_wise(field + ":", shown, ""))
            all_missing = missing if all_missing is None else pc.and_(all_missing, missing)
        if table.num_rows and pc.any(all_missing).as_py():
            row = _first_bad(all_missing)
            raise HoodieKeyError(f"record key fields {self.record_key_fields} are all null or empty at row {row}")
        return _join(parts, ",", table.num_rows)

    def record_keys(self, table):
        """Record key of every row as a pa.StringArray."""
        if len(self.record_key_fields) == 1:
            return self._simple_keys(table)
        return self._complex_keys(table)

    def partition_paths(self, table):
        """Relative partition path of every row as a pa.StringArray."""
        parts = [
            _partition_part(self._values(table, f), f, self.hive_style, self.url_encode) for f in self.partition_fields
        ]
        return _join(parts, "/", table.num_rows)

    def __repr__(self):
        return (
            f"{type(self).__name__}(record_key_fields={self.record_key_fields}, "
            f"partition_fields={self.partition_fields}, hive_style={self.hive_style}, "
            f"url_encode={self.url_encode})"
        )


class SimpleKeyGenerator(KeyGenerator):
    """One record key field rendered as-is; one partition field."""

    class_name = "org.apache.hudi.keygen.SimpleKeyGenerator"

    def __init__(self, record_key_fields, partition_fields=(), **kw):
        super().__init__(record_key_fields, partition_fields, **kw)
        if len(self.record_key_fields) != 1:
            raise HoodieConfigError(f"SimpleKeyGenerator takes one record key field, got {self.record_key_fields}")
        if len(self.partition_fields) > 1:
            raise HoodieConfigError(f"SimpleKeyGenerator takes one partition field, got {self.partition_fields}")

    def record_keys(self, table):
        return self._simple_keys(table)


class ComplexKeyGenerator(KeyGenerator):
    """`f1:v1,f2:v2` record keys (also for a single field, as Hudi <= 0.14.0 writes them)."""

    class_name = "org.apache.hudi.keygen.ComplexKeyGenerator"

    def __init__(self, record_key_fields, partition_fields=(), new_encoding=False, **kw):
        super().__init__(record_key_fields, partition_fields, **kw)
        self.new_encoding = new_encoding

    def record_keys(self, table):
        if self.new_encoding and len(self.record_key_fields) == 1:
            return self._simple_keys(table)
        return self._complex_keys(table)


class NonpartitionedKeyGenerator(KeyGenerator):
    """Partition path is always "" (simple key for one field, complex for several)."""

    class_name = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"

    def __init__(self, record_key_fields, partition_fields=(), **kw):
        super().__init__(record_key_fields, (), **kw)

    def partition_paths(self, table):
        return constant_strings("", table.num_rows)


class GlobalDeleteKeyGenerator(NonpartitionedKeyGenerator):
    """Complex record keys, empty partition path."""

    class_name = "org.apache.hudi.keygen.GlobalDeleteKeyGenerator"

    def record_keys(self, table):
        return self._complex_keys(table)


# ---------------------------------------------------------------- timestamp based

_TIME_UNITS_MS = {
    "DAYS": (86400000, 1),
    "HOURS": (3600000, 1),
    "MINUTES": (60000, 1),
    "SECONDS": (1000, 1),
    "MILLISECONDS": (1, 1),
    "MICROSECONDS": (1, 1000),
    "NANOSECONDS": (1, 1000000),
}
_TYPE_UNITS = {"EPOCHMILLISECONDS": "MILLISECONDS", "EPOCHMICROSECONDS": "MICROSECONDS", "UNIX_TIMESTAMP": "SECONDS"}


class TimestampBasedKeyGenerator(SimpleKeyGenerator):
    """Simple record key; partition path = first partition field parsed as a time and re-formatted."""

    class_name = "org.apache.hudi.keygen.TimestampBasedKeyGenerator"

    def __init__(
        self,
        record_key_fields,
        partition_fields=(),
        *,
        timestamp_type,
        output_format,
        input_formats=(),
        input_timezone=None,
        output_timezone=None,
        scalar_unit="SECONDS",
        **kw,
    ):
        super().__init__(record_key_fields, partition_fields, **kw)
        if not self.partition_fields:
            raise HoodieConfigError("TimestampBasedKeyGenerator needs a partition field")
        self.timestamp_type = timestamp_type.upper()
        if self.timestamp_type not in ("DATE_STRING", "MIXED", "SCALAR", *_TYPE_UNITS):
            raise HoodieConfigError(f"unknown hoodie.keygen.timebased.timestamp.type {timestamp_type!r}")
        unit = scalar_unit.upper() if self.timestamp_type == "SCALAR" else _TYPE_UNITS.get(self.timestamp_type)
        if unit is not None and unit not in _TIME_UNITS_MS:
            raise HoodieConfigError(f"unknown time unit {scalar_unit!r}")
        self.unit = unit
        self.input_formats = [f.strip() for f in input_formats if f.strip()]
        if self.timestamp_type in ("DATE_STRING", "MIXED") and not self.input_formats:
            raise HoodieConfigError("hoodie.keygen.timebased.input.dateformat is required for DATE_STRING")
        self.input_regexes = [parse_regex(f) for f in self.input_formats]
        self.output_format = output_format
        self.output_tokens = format_tokens(output_format)
        self.input_timezone = java_zone(input_timezone)
        self.output_timezone = java_zone(output_timezone)

    # -- instants

    def _unit_to_ms(self, values):
        if self.unit is None:
            raise HoodieKeyError(
                f"partition field {self.partition_fields[0]!r}: numeric value needs a numeric "
                f"timestamp type, not {self.timestamp_type}"
            )
        mul, div = _TIME_UNITS_MS[self.unit]
        if div > 1:
            return np.sign(values) * (np.abs(values) // div)
        return values * mul

    def _numeric(self, col):
        t = col.type
        if pa.types.is_timestamp(t):
            col = col.cast(pa.timestamp("us", tz=t.tz), safe=False).cast(pa.int64())
        elif pa.types.is_date32(t) or pa.types.is_date64(t):
            col = col.cast(pa.date32()).cast(pa.int32()).cast(pa.int64())
        elif pa.types.is_floating(t) or pa.types.is_decimal(t):
            col = pc.trunc(col.cast(pa.float64())).cast(pa.int64())
        else:
            col = col.cast(pa.int64())
        return self._unit_to_ms(np.asarray(col.fill_null(1).to_numpy(zero_copy_only=False), dtype=np.int64))

    def _default_date_string(self):
        zone = self.input_timezone or self.output_timezone or "UTC"
        return format_epoch_ms(self.input_formats[0], 1, zone)

    def _parse_strings(self, col):
        """Epoch ms and local wall-clock fields (as parsed) of date strings."""
        field = self.partition_fields[0]
        col = col.fill_null(self._default_date_string())
        fields, offset, has_offset, parsed = parse_date_strings(col, self.input_regexes)
        if not parsed.all():
            row = int(np.flatnonzero(~parsed)[0])
            raise HoodieKeyError(
                f"unable to parse partition field {field!r} value {col[row].as_py()!r} at row {row} "
                f"with {self.input_formats}"
            )
        return local_to_epoch(fields, offset, has_offset, self.input_timezone)

    def partition_instants(self, table):
        """(epoch ms, local wall-clock ms in the display zone) per row."""
        col = field_column(table, self.partition_fields[0])
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            if self.timestamp_type not in ("DATE_STRING", "MIXED"):
                raise HoodieKeyError(
                    f"partition field {self.partition_fields[0]!r} holds strings but "
                    f"timestamp type is {self.timestamp_type}"
                )
            epoch, wall = self._parse_strings(col.cast(pa.string()))
            if self.output_timezone is None and self.input_timezone is None:
                return epoch, wall
        else:
            epoch = self._numeric(col)
        zone = (
            self.output_timezone
            or (self.input_timezone if self.timestamp_type in ("DATE_STRING", "MIXED") else None)
            or "UTC"
        )
        local = pc.local_timestamp(pa.array(epoch, pa.timestamp("ms", tz=zone))).cast(pa.int64())
        wall = np.asarray(local.to_numpy(zero_copy_only=False), np.int64).copy()
        fix_far_future(epoch, wall, zone)
        return epoch, wall

    def partition_paths(self, table):
        _, wall = self.partition_instants(table)
        values = format_wall_clock(wall, self.output_tokens)
        field = self.partition_fields[0]
        if self.url_encode:
            values = escape_path_values(values)
        if self.hive_style:
            values = pc.binary_join_element_wise(field + "=", values, "")
        return values


# ---------------------------------------------------------------- factory

_TIMEBASED_PREFIXES = ("hoodie.keygen.timebased.", "hoodie.deltastreamer.keygen.timebased.")


def _prop(props, *keys, default=None):
    for k in keys:
        v = props.get(k)
        if v is not None and str(v) != "":
            return str(v)
    return default


def _timebased(props, name, default=None):
    return _prop(props, *(p + name for p in _TIMEBASED_PREFIXES), default=default)


def _bool(value):
    return str(value).strip().lower() == "true"


_CLASSES = {
    "SimpleKeyGenerator": "SIMPLE",
    "SimpleAvroKeyGenerator": "SIMPLE",
    "ComplexKeyGenerator": "COMPLEX",
    "ComplexAvroKeyGenerator": "COMPLEX",
    "NonpartitionedKeyGenerator": "NON_PARTITION",
    "NonpartitionedAvroKeyGenerator": "NON_PARTITION",
    "TimestampBasedKeyGenerator": "TIMESTAMP",
    "TimestampBasedAvroKeyGenerator": "TIMESTAMP",
    "GlobalDeleteKeyGenerator": "GLOBAL_DELETE",
    "GlobalAvroDeleteKeyGenerator": "GLOBAL_DELETE",
}


def key_generator_type(class_name):
    """Hudi 1.x's `hoodie.table.keygenerator.type` of a key generator class (KeyGeneratorType): the kind, `_AVRO`
    for the Avro classes, USER_PROVIDED for a class Hudi does not ship."""
    name = class_name.rsplit(".", 1)[-1]
    kind = {"CustomKeyGenerator": "CUSTOM", "CustomAvroKeyGenerator": "CUSTOM"}.get(name) or _CLASSES.get(name)
    if kind is None:
        return "USER_PROVIDED"
    return f"{kind}_AVRO" if "Avro" in name and kind != "GLOBAL_DELETE" else kind


def make_key_generator(props):
    """Key generator from hoodie.properties-style props (or writer options, or an object with .props)."""
    props = getattr(props, "props", props)
    props = dict(props)
    record_fields = _prop(props, "hoodie.table.recordkey.fields", "hoodie.datasource.write.recordkey.field", default="")
    partition_fields = _prop(
        props, "hoodie.table.partition.fields", "hoodie.datasource.write.partitionpath.field", default=""
    )
    record_fields = [f.strip() for f in record_fields.split(",") if f.strip()]
    partition_fields = [f.strip() for f in partition_fields.split(",") if f.strip()]
    cls = _prop(props, "hoodie.table.keygenerator.class", "hoodie.datasource.write.keygenerator.class")
    if cls is not None:
        kind = _CLASSES.get(cls.rsplit(".", 1)[-1])
        if kind is None:
            raise HoodieConfigError(f"unsupported key generator class {cls!r}")
    else:
        kind = _prop(props, "hoodie.table.keygenerator.type", "hoodie.datasource.write.keygenerator.type")
        if kind is None:
            if not partition_fields:
                kind = "NON_PARTITION"
            elif len(partition_fields) == 1 and len(record_fields) <= 1:
                kind = "SIMPLE"
            else:
                kind = "COMPLEX"
        kind = kind.upper()
    kw = dict(
        hive_style=_bool(_prop(props, "hoodie.datasource.write.hive_style_partitioning", default="false")),
        url_encode=_bool(_prop(props, "hoodie.datasource.write.partitionpath.urlencode", default="false")),
        consistent_logical_timestamp=_bool(
            _prop(props, "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled", default="false")
        ),
    )
    if kind == "SIMPLE":
        return SimpleKeyGenerator(record_fields, partition_fields, **kw)
    if kind == "COMPLEX":
        return ComplexKeyGenerator(
            record_fields,
            partition_fields,
            new_encoding=_bool(_prop(props, "hoodie.write.complex.keygen.new.encoding", default="false")),
            **kw,
        )
    if kind in ("NON_PARTITION", "NONPARTITIONED"):
        return NonpartitionedKeyGenerator(record_fields, **kw)
    if kind == "GLOBAL_DELETE":
        return GlobalDeleteKeyGenerator(record_fields, **kw)
    if kind == "TIMESTAMP":
        ttype = _timebased(props, "timestamp.type")
        input_format = _timebased(props, "input.dateformat", default="")
        if ttype is None:
            if not input_format:
                raise HoodieConfigError("hoodie.keygen.timebased.timestamp.type is required")
            ttype = "DATE_STRING"
        delimiter = _timebased(props, "input.dateformat.list.delimiter.regex", default=",")
        output_format = _timebased(props, "output.dateformat")
        if output_format is None:
            raise HoodieConfigError("hoodie.keygen.timebased.output.dateformat is required")
        general_tz = _timebased(props, "timezone")
        return TimestampBasedKeyGenerator(
            record_fields,
            partition_fields[:1],
            timestamp_type=ttype,
            output_format=output_format,
            input_formats=re.split(delimiter, input_format) if input_format else [],
            input_timezone=general_tz if general_tz is not None else _timebased(props, "input.timezone"),
            output_timezone=general_tz if general_tz is not None else _timebased(props, "output.timezone"),
            scalar_unit=_timebased(props, "timestamp.scalar.time.unit", default="SECONDS"),
            **kw,
        )
    raise HoodieConfigError(f"unsupported key generator type {kind!r}")
