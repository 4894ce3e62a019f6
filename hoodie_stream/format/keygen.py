"""Hudi key generators (record key and partition path), vectorized over Arrow tables.

Values are rendered as Hudi's Avro key generators render them (HoodieAvroUtils.getNestedFieldValAsString):
integers in decimal, booleans true/false, strings as-is, dates yyyy-MM-dd, decimals as BigDecimal.toString,
floats as Java Float/Double.toString, timestamps as the raw epoch number of the Avro timestamp-micros value
(or java.sql.Timestamp text in UTC with consistent logical timestamps enabled). Binary and nested values are
rejected.
"""

import math
import re
import zoneinfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import HoodieConfigError, HoodieKeyError

DEFAULT_PARTITION_PATH = "__HIVE_DEFAULT_PARTITION__"
NULL_PLACEHOLDER = "__null__"
EMPTY_PLACEHOLDER = "__empty__"

# Hive FileUtils escape set used by PartitionPathEncodeUtils.escapePathName
_ESCAPED = [chr(c) for c in range(0x20)] + list("\"#%'*/:=?\\\x7f{[]^")
_ESCAPE_CLASS = "[" + "".join(f"\\x{{{ord(c):x}}}" for c in _ESCAPED) + "]"


# ---------------------------------------------------------------- value rendering

def _column(table, field):
    """Column for a (possibly dotted, nested) field name as one Arrow array."""
    parts = field.split(".")
    if parts[0] not in table.column_names:
        raise HoodieKeyError(f"key field {field!r} does not exist in the input records")
    col = table[parts[0]]
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    for depth, part in enumerate(parts[1:], 1):
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
    seconds = pa.array(np.asarray(ms.fill_null(0).to_numpy(zero_copy_only=False), np.int64) // 1000,
                       pa.timestamp("s", tz="UTC"))
    text = pc.binary_join_element_wise(pc.strftime(seconds, format="%Y-%m-%d %H:%M:%S"), frac, ".")
    return pc.if_else(col.is_null(), pa.scalar(None, pa.string()), text)


def value_strings(table, field, consistent_logical_timestamp=False):
    """String rendering of one key field, nulls kept as nulls."""
    col = _column(table, field)
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
        return pa.array([""] * n, pa.string())
    if len(parts) == 1:
        return parts[0]
    return pc.binary_join_element_wise(*parts, sep)


# ---------------------------------------------------------------- key generators

class KeyGenerator:
    """Base key generator: record keys per the number of key fields, partition path per field list."""

    class_name = None

    def __init__(self, record_key_fields, partition_fields=(), hive_style=False, url_encode=False,
                 consistent_logical_timestamp=False):
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
            shown = pc.if_else(pc.is_null(values), NULL_PLACEHOLDER,
                               pc.if_else(missing, EMPTY_PLACEHOLDER, values))
            parts.append(pc.binary_join_element_wise(field + ":", shown, ""))
            all_missing = missing if all_missing is None else pc.and_(all_missing, missing)
        if table.num_rows and pc.any(all_missing).as_py():
            row = _first_bad(all_missing)
            raise HoodieKeyError(
                f"record key fields {self.record_key_fields} are all null or empty at row {row}")
        return _join(parts, ",", table.num_rows)

    def record_keys(self, table):
        """Record key of every row as a pa.StringArray."""
        if len(self.record_key_fields) == 1:
            return self._simple_keys(table)
        return self._complex_keys(table)

    def partition_paths(self, table):
        """Relative partition path of every row as a pa.StringArray."""
        parts = [_partition_part(self._values(table, f), f, self.hive_style, self.url_encode)
                 for f in self.partition_fields]
        return _join(parts, "/", table.num_rows)

    def __repr__(self):
        return (f"{type(self).__name__}(record_key_fields={self.record_key_fields}, "
                f"partition_fields={self.partition_fields}, hive_style={self.hive_style}, "
                f"url_encode={self.url_encode})")


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
        return pa.array([""] * table.num_rows, pa.string())


class GlobalDeleteKeyGenerator(NonpartitionedKeyGenerator):
    """Complex record keys, empty partition path."""

    class_name = "org.apache.hudi.keygen.GlobalDeleteKeyGenerator"

    def record_keys(self, table):
        return self._complex_keys(table)


# ---------------------------------------------------------------- timestamp based

_TIME_UNITS_MS = {"DAYS": (86400000, 1), "HOURS": (3600000, 1), "MINUTES": (60000, 1), "SECONDS": (1000, 1),
                  "MILLISECONDS": (1, 1), "MICROSECONDS": (1, 1000), "NANOSECONDS": (1, 1000000)}
_TYPE_UNITS = {"EPOCHMILLISECONDS": "MILLISECONDS", "EPOCHMICROSECONDS": "MICROSECONDS", "UNIX_TIMESTAMP": "SECONDS"}
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December"]


def _pattern_tokens(pattern):
    """Tokens of a Joda/SimpleDateFormat pattern: ('field', letter, count) or ('text', literal)."""
    tokens, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "'":
            j = pattern.find("'", i + 1)
            if j == i + 1:
                tokens.append(("text", "'"))
                i += 2
                continue
            if j < 0:
                raise HoodieConfigError(f"unterminated quote in date format {pattern!r}")
            tokens.append(("text", pattern[i + 1:j].replace("''", "'")))
            i = j + 1
        elif c.isalpha():
            j = i
            while j < len(pattern) and pattern[j] == c:
                j += 1
            tokens.append(("field", c, j - i))
            i = j
        else:
            tokens.append(("text", c))
            i += 1
    return tokens


_PARSE_GROUPS = {"y": "y", "M": "M", "d": "d", "H": "H", "m": "m", "s": "s", "S": "S", "Z": "Z", "X": "Z"}


def _parse_regex(pattern):
    out = []
    for tok in _pattern_tokens(pattern):
        if tok[0] == "text":
            out.append(re.escape(tok[1]))
            continue
        _, letter, count = tok
        if letter not in _PARSE_GROUPS:
            raise HoodieConfigError(f"date format letter {letter!r} in {pattern!r} is not supported")
        if letter == "y":
            out.append(r"(?P<y>\d{2})" if count == 2 else r"(?P<y>[-+]?\d{4})")
        elif letter == "M" and count >= 3:
            out.append("(?P<M>" + "|".join(m[:3] if count == 3 else m for m in _MONTHS) + ")")
        elif letter == "S":
            out.append(r"(?P<S>\d{1,9})")
        elif letter in "ZX":
            out.append(r"(?P<Z>Z|[+-]\d{2}(?::?\d{2})?)")
        else:
            out.append(r"(?P<%s>\d{1,%d})" % (letter, max(count, 2)))
    return "^" + "".join(out) + "$"


def _days_from_civil(y, m, d):
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _java_zone(name):
    """Arrow/zoneinfo name for a Java TimeZone id (unknown ids are GMT in Java)."""
    if name is None:
        return None
    name = name.strip()
    if name in ("", ):
        return None
    if name in ("GMT", "UTC", "Z", "UT"):
        return "UTC"
    m = re.fullmatch(r"(?:GMT|UTC)([+-])(\d{1,2})(?::?(\d{2}))?", name)
    if m:
        return f"{m.group(1)}{int(m.group(2)):02d}:{int(m.group(3) or 0):02d}"
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return "UTC"
    return name


class TimestampBasedKeyGenerator(SimpleKeyGenerator):
    """Simple record key; partition path = first partition field parsed as a time and re-formatted."""

    class_name = "org.apache.hudi.keygen.TimestampBasedKeyGenerator"

    def __init__(self, record_key_fields, partition_fields=(), *, timestamp_type, output_format,
                 input_formats=(), input_timezone=None, output_timezone=None, scalar_unit="SECONDS", **kw):
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
        self.input_regexes = [_parse_regex(f) for f in self.input_formats]
        self.output_format = output_format
        self.output_tokens = _pattern_tokens(output_format)
        for tok in self.output_tokens:
            if tok[0] == "field" and tok[1] not in "yMdHmsS":
                raise HoodieConfigError(f"output date format letter {tok[1]!r} in {output_format!r} is not supported")
        self.input_timezone = _java_zone(input_timezone)
        self.output_timezone = _java_zone(output_timezone)

    # -- instants

    def _unit_to_ms(self, values):
        if self.unit is None:
            raise HoodieKeyError(f"partition field {self.partition_fields[0]!r}: numeric value needs a numeric "
                                 f"timestamp type, not {self.timestamp_type}")
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
        y, mo, d, h, mi, s, ms, off = _local_fields_one(1, zone)
        return _format_one(self.input_formats[0], y, mo, d, h, mi, s, ms, off)

    def _parse_strings(self, col):
        """Epoch ms and local wall-clock fields (as parsed) of date strings."""
        field = self.partition_fields[0]
        col = col.fill_null(self._default_date_string())
        n = len(col)
        fields = {k: np.zeros(n, np.int64) for k in "yMdHmsS"}
        offset = np.zeros(n, np.int64)
        has_offset = np.zeros(n, bool)
        done = np.zeros(n, bool)
        for regex in self.input_regexes:
            if done.all():
                break
            parsed = pc.extract_regex(col, regex)
            ok = np.asarray(parsed.is_valid().to_numpy(zero_copy_only=False)) & ~done
            names = [parsed.type.field(i).name for i in range(parsed.type.num_fields)]
            for name in names:
                arr = pc.struct_field(parsed, name).fill_null("")
                if name == "Z":
                    vals = _offsets_ms(arr)
                    offset[ok] = vals[ok]
                    has_offset[ok] = True
                    continue
                if name == "S":
                    arr = pc.utf8_slice_codeunits(pc.utf8_rpad(arr, 3, "0"), 0, 3)
                elif name == "M" and not pc.all(pc.utf8_is_digit(pc.if_else(pc.equal(arr, ""), "0", arr))).as_py():
                    arr = pa.array([str(1 + [m[:len(r)] for m in _MONTHS].index(r)) if r and not r.isdigit() else r
                                    for r in arr.to_pylist()], pa.string())
                arr = pc.if_else(pc.equal(arr, ""), "0", arr)
                vals = np.asarray(arr.cast(pa.int64()).to_numpy(zero_copy_only=False), np.int64)
                if name == "y" and "(?P<y>\\d{2})" in regex:
                    vals = vals + 2000
                fields[name][ok] = vals[ok]
            if "d" not in names:
                fields["d"][ok] = 1
            if "M" not in names:
                fields["M"][ok] = 1
            done |= ok
        if not done.all():
            row = int(np.flatnonzero(~done)[0])
            raise HoodieKeyError(f"unable to parse partition field {field!r} value {col[row].as_py()!r} at row {row} "
                                 f"with {self.input_formats}")
        days = _days_from_civil(fields["y"], fields["M"], fields["d"])
        wall = days * 86400000 + fields["H"] * 3600000 + fields["m"] * 60000 + fields["s"] * 1000 + fields["S"]
        epoch = wall - offset
        if self.input_timezone and not has_offset.all():
            zoned = pc.assume_timezone(pa.array(wall, pa.timestamp("ms")), self.input_timezone,
                                       ambiguous="earliest", nonexistent="latest").cast(pa.int64())
            epoch = np.where(has_offset, epoch, np.asarray(zoned.to_numpy(zero_copy_only=False), np.int64))
        return epoch, wall

    def partition_instants(self, table):
        """(epoch ms, local wall-clock ms in the display zone) per row."""
        col = _column(table, self.partition_fields[0])
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            if self.timestamp_type not in ("DATE_STRING", "MIXED"):
                raise HoodieKeyError(f"partition field {self.partition_fields[0]!r} holds strings but "
                                     f"timestamp type is {self.timestamp_type}")
            epoch, wall = self._parse_strings(col.cast(pa.string()))
            if self.output_timezone is None and self.input_timezone is None:
                return epoch, wall
        else:
            epoch = self._numeric(col)
        zone = self.output_timezone or (self.input_timezone if self.timestamp_type in ("DATE_STRING", "MIXED")
                                        else None) or "UTC"
        local = pc.local_timestamp(pa.array(epoch, pa.timestamp("ms", tz=zone))).cast(pa.int64())
        wall = np.asarray(local.to_numpy(zero_copy_only=False), np.int64).copy()
        _fix_far_future(epoch, wall, zone)
        return epoch, wall

    def partition_paths(self, table):
        _, wall = self.partition_instants(table)
        ts = pa.array(wall, pa.timestamp("ms"))
        comps = {"y": pc.year(ts), "M": pc.month(ts), "d": pc.day(ts), "H": pc.hour(ts), "m": pc.minute(ts),
                 "s": pc.second(ts), "S": pc.millisecond(ts)}
        pieces = []
        for tok in self.output_tokens:
            if tok[0] == "text":
                pieces.append(pa.scalar(tok[1]))
                continue
            _, letter, count = tok
            v = comps[letter]
            if letter == "M" and count >= 3:
                names = pa.array([m[:3] if count == 3 else m for m in _MONTHS])
                pieces.append(pc.take(names, pc.subtract(v, 1)))
                continue
            if letter == "y" and count == 2:
                v = pc.abs(pc.subtract(v, pc.multiply(pc.divide(v, 100), 100)))
            if letter == "S":
                s = pc.utf8_lpad(v.cast(pa.string()), 3, "0")
                pieces.append(pc.utf8_slice_codeunits(pc.utf8_rpad(s, count, "0"), 0, count))
                continue
            pieces.append(pc.utf8_lpad(v.cast(pa.string()), count, "0"))
        n = table.num_rows
        if not pieces:
            values = pa.array([""] * n, pa.string())
        else:
            arrays = [p if isinstance(p, pa.Array) else pa.array([p.as_py()] * n, pa.string()) for p in pieces]
            values = _join(arrays, "", n) if len(arrays) > 1 else arrays[0]
        field = self.partition_fields[0]
        if self.url_encode:
            values = escape_path_values(values)
        if self.hive_style:
            values = pc.binary_join_element_wise(field + "=", values, "")
        return values


_TZDB_LIMIT_MS = 2_147_483_647_000  # Arrow's tz database stops listing DST transitions in 2038


def _fix_far_future(epoch, wall, zone):
    """Recompute wall-clock times past 2038 with zoneinfo's recurring rules, as java.time applies them."""
    if zone == "UTC" or zone[0] in "+-":
        return
    far = np.flatnonzero(np.asarray(epoch) >= _TZDB_LIMIT_MS)
    for i in far:  # rare: only rows dated after 2038 take this path
        off = _local_fields_one(int(epoch[i]), zone)[-1]
        wall[i] = int(epoch[i]) + off


def _offset_ms(text):
    if not text or text == "Z":
        return 0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    return sign * (int(digits[:2]) * 3600000 + int(digits[2:4] or 0) * 60000)


def _offsets_ms(arr):
    """Offsets like Z, +0530, -08:00 (vectorized) in ms."""
    digits = pc.replace_substring(arr, ":", "")
    hours = pc.utf8_slice_codeunits(digits, 1, 3)
    minutes = pc.utf8_slice_codeunits(digits, 3, 5)
    zero = pc.or_(pc.equal(arr, "Z"), pc.equal(arr, ""))
    hours = pc.if_else(pc.or_(zero, pc.equal(hours, "")), "0", hours).cast(pa.int64())
    minutes = pc.if_else(pc.or_(zero, pc.equal(minutes, "")), "0", minutes).cast(pa.int64())
    total = np.asarray(pc.add(pc.multiply(hours, 3600000), pc.multiply(minutes, 60000)).to_numpy(
        zero_copy_only=False), np.int64)
    sign = np.where(np.asarray(pc.starts_with(arr, "-").to_numpy(zero_copy_only=False)), -1, 1)
    return sign * total


def _local_fields_one(epoch_ms, zone):
    import datetime as dt
    tz = dt.timezone.utc if zone == "UTC" else (
        dt.timezone(dt.timedelta(milliseconds=_offset_ms(zone))) if zone[0] in "+-" else zoneinfo.ZoneInfo(zone))
    t = dt.datetime.fromtimestamp(epoch_ms / 1000, tz)
    off = int(t.utcoffset().total_seconds() * 1000)
    return t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond // 1000, off


def _format_one(pattern, y, mo, d, h, mi, s, ms, off):
    out = []
    for tok in _pattern_tokens(pattern):
        if tok[0] == "text":
            out.append(tok[1])
            continue
        _, letter, count = tok
        if letter in "ZX":
            sign = "-" if off < 0 else "+"
            a = abs(off) // 60000
            out.append(f"{sign}{a // 60:02d}{':' if count == 2 else ''}{a % 60:02d}")
        elif letter == "S":
            out.append(f"{ms:03d}".ljust(count, "0")[:count])
        else:
            v = {"y": y % 100 if count == 2 else y, "M": mo, "d": d, "H": h, "m": mi, "s": s}[letter]
            out.append(str(v).zfill(count))
    return "".join(out)


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
    "SimpleKeyGenerator": "SIMPLE", "SimpleAvroKeyGenerator": "SIMPLE",
    "ComplexKeyGenerator": "COMPLEX", "ComplexAvroKeyGenerator": "COMPLEX",
    "NonpartitionedKeyGenerator": "NON_PARTITION", "NonpartitionedAvroKeyGenerator": "NON_PARTITION",
    "TimestampBasedKeyGenerator": "TIMESTAMP", "TimestampBasedAvroKeyGenerator": "TIMESTAMP",
    "GlobalDeleteKeyGenerator": "GLOBAL_DELETE", "GlobalAvroDeleteKeyGenerator": "GLOBAL_DELETE",
}


def make_key_generator(props):
    """Key generator from hoodie.properties-style props (or writer options, or an object with .props)."""
    props = getattr(props, "props", props)
    props = dict(props)
    record_fields = _prop(props, "hoodie.table.recordkey.fields", "hoodie.datasource.write.recordkey.field", default="")
    partition_fields = _prop(props, "hoodie.table.partition.fields", "hoodie.datasource.write.partitionpath.field",
                             default="")
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
        consistent_logical_timestamp=_bool(_prop(
            props, "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled", default="false")),
    )
    if kind == "SIMPLE":
        return SimpleKeyGenerator(record_fields, partition_fields, **kw)
    if kind == "COMPLEX":
        return ComplexKeyGenerator(record_fields, partition_fields,
                                   new_encoding=_bool(_prop(props, "hoodie.write.complex.keygen.new.encoding",
                                                            default="false")), **kw)
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
            record_fields, partition_fields[:1],
            timestamp_type=ttype,
            output_format=output_format,
            input_formats=re.split(delimiter, input_format) if input_format else [],
            input_timezone=general_tz if general_tz is not None else _timebased(props, "input.timezone"),
            output_timezone=general_tz if general_tz is not None else _timebased(props, "output.timezone"),
            scalar_unit=_timebased(props, "timestamp.scalar.time.unit", default="SECONDS"),
            **kw,
        )
    raise HoodieConfigError(f"unsupported key generator type {kind!r}")
