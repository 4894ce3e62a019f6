"""Java date patterns, time zone ids and wall-clock times, as Hudi's TimestampBasedKeyGenerator uses them.

Patterns follow SimpleDateFormat/Joda letters: parsing takes y, M (digits or month names), d, H, m, s, S and the
offsets Z/X; formatting takes y, M, d, H, m, s and S. Text in quotes is literal. Time zone ids are Java's: fixed
offsets (GMT+05:30), region ids, and GMT for an unknown id. Values are vectorized over Arrow/numpy arrays; epoch
and wall-clock times are int64 milliseconds.
"""

import datetime
import re
import zoneinfo

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import HoodieConfigError
from .string_buffers import constant_strings

_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_FORMAT_LETTERS = "yMdHmsS"


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
            tokens.append(("text", pattern[i + 1 : j].replace("''", "'")))
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


# ---------------------------------------------------------------- parsing

_PARSE_GROUPS = {"y": "y", "M": "M", "d": "d", "H": "H", "m": "m", "s": "s", "S": "S", "Z": "Z", "X": "Z"}


def parse_regex(pattern):
    """Regular expression matching a whole value of the input pattern, one named group per field letter."""
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


def parse_date_strings(col, regexes):
    """Fields of date strings parsed with the first of `regexes` (from parse_regex) that matches each value.

    Returns (fields, offset, has_offset, parsed): fields maps y M d H m s S to int64 arrays (S in milliseconds,
    two-digit years in 2000-2099, day and month 1 when the pattern has none); offset is the parsed Z/X offset in ms
    where has_offset; parsed is False for the values no pattern matched (their fields are 0).
    """
    n = len(col)
    fields = {k: np.zeros(n, np.int64) for k in "yMdHmsS"}
    offset = np.zeros(n, np.int64)
    has_offset = np.zeros(n, bool)
    done = np.zeros(n, bool)
    for regex in regexes:
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
                arr = pa.array(
                    [
                        str(1 + [m[: len(r)] for m in _MONTHS].index(r)) if r and not r.isdigit() else r
                        for r in arr.to_pylist()
                    ],
                    pa.string(),
                )
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
    return fields, offset, has_offset, done


def local_to_epoch(fields, offset, has_offset, zone):
    """(epoch ms, wall-clock ms) of parsed fields: a parsed offset wins, else the fields are local times in `zone`
    (a gap takes the later time, an overlap the earlier), else UTC."""
    days = _days_from_civil(fields["y"], fields["M"], fields["d"])
    wall = days * 86400000 + fields["H"] * 3600000 + fields["m"] * 60000 + fields["s"] * 1000 + fields["S"]
    epoch = wall - offset
    if zone and not has_offset.all():
        zoned = pc.assume_timezone(
            pa.array(wall, pa.timestamp("ms")), zone, ambiguous="earliest", nonexistent="latest"
        ).cast(pa.int64())
        epoch = np.where(has_offset, epoch, np.asarray(zoned.to_numpy(zero_copy_only=False), np.int64))
    return epoch, wall


def _days_from_civil(y, m, d):
    y = y - (m <= 2)
    era = np.floor_divide(y, 400)
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


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
    total = np.asarray(
        pc.add(pc.multiply(hours, 3600000), pc.multiply(minutes, 60000)).to_numpy(zero_copy_only=False), np.int64
    )
    sign = np.where(np.asarray(pc.starts_with(arr, "-").to_numpy(zero_copy_only=False)), -1, 1)
    return sign * total


# ---------------------------------------------------------------- time zones


def java_zone(name):
    """Arrow/zoneinfo name for a Java TimeZone id (unknown ids are GMT in Java)."""
    if name is None:
        return None
    name = name.strip()
    if name in ("",):
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


_TZDB_LIMIT_MS = 2_147_483_647_000  # Arrow's tz database stops listing DST transitions in 2038


def fix_far_future(epoch, wall, zone):
    """Recompute wall-clock times past 2038 with zoneinfo's recurring rules, as java.time applies them."""
    if zone == "UTC" or zone[0] in "+-":
        return
    far = np.flatnonzero(np.asarray(epoch) >= _TZDB_LIMIT_MS)
    for i in far:  # rare: only rows dated after 2038 take this path
        off = _local_fields(int(epoch[i]), zone)[-1]
        wall[i] = int(epoch[i]) + off


def _local_fields(epoch_ms, zone):
    tz = (
        datetime.timezone.utc
        if zone == "UTC"
        else (
            datetime.timezone(datetime.timedelta(milliseconds=_offset_ms(zone)))
            if zone[0] in "+-"
            else zoneinfo.ZoneInfo(zone)
        )
    )
    t = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz)
    off = int(t.utcoffset().total_seconds() * 1000)
    return t.year, t.month, t.day, t.hour, t.minute, t.second, t.microsecond // 1000, off


# ---------------------------------------------------------------- formatting


def format_tokens(pattern):
    """Tokens of an output pattern; letters other than y M d H m s S are refused."""
    tokens = _pattern_tokens(pattern)
    for tok in tokens:
        if tok[0] == "field" and tok[1] not in _FORMAT_LETTERS:
            raise HoodieConfigError(f"output date format letter {tok[1]!r} in {pattern!r} is not supported")
    return tokens


def format_wall_clock(wall, tokens):
    """Wall-clock ms (int64 array) formatted with the tokens of format_tokens, as a pa.StringArray."""
    n = len(wall)
    ts = pa.array(wall, pa.timestamp("ms"))
    comps = {
        "y": pc.year(ts),
        "M": pc.month(ts),
        "d": pc.day(ts),
        "H": pc.hour(ts),
        "m": pc.minute(ts),
        "s": pc.second(ts),
        "S": pc.millisecond(ts),
    }
    pieces = []
    for tok in tokens:
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
    if not pieces:
        return constant_strings("", n)
    arrays = [p if isinstance(p, pa.Array) else constant_strings(p.as_py(), n) for p in pieces]
    return pc.binary_join_element_wise(*arrays, "") if len(arrays) > 1 else arrays[0]


def format_epoch_ms(pattern, epoch_ms, zone):
    """One instant formatted with a pattern (letters y M d H m s S and the offsets Z/X) in `zone`."""
    y, mo, d, h, mi, s, ms, off = _local_fields(epoch_ms, zone)
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
