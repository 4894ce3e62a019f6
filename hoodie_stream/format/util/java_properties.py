"""Java .properties text: load and store exactly as java.util.Properties does."""

import datetime

from ...errors import HoodieFormatError

_UNESCAPE = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_ESCAPE = {
    "\t": "\\t",
    "\n": "\\n",
    "\r": "\\r",
    "\f": "\\f",
    "\\": "\\\\",
    "=": "\\=",
    ":": "\\:",
    "#": "\\#",
    "!": "\\!",
}
_DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def _logical_lines(text):
    """Join continuation lines (odd number of trailing backslashes); drop comments and blank lines."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        yield line


def _unescape(s):
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= len(s):
            break
        c = s[i]
        i += 1
        if c == "u":
            code = s[i : i + 4]
            if len(code) != 4 or any(ch not in "0123456789abcdefABCDEF" for ch in code):
                raise HoodieFormatError(f"Malformed \\uxxxx encoding: \\u{code}")
            out.append(chr(int(code, 16)))
            i += 4
        else:
            out.append(_UNESCAPE.get(c, c))
    return "".join(out).encode("utf-16", "surrogatepass").decode("utf-16")


def _split(line):
    """Split a logical line into raw key and value, following Properties.load."""
    n = len(line)
    key_len = 0
    value_start = n
    has_sep = False
    backslash = False
    while key_len < n:
        c = line[key_len]
        if c in "=:" and not backslash:
            value_start = key_len + 1
            has_sep = True
            break
        if c in " \t\f" and not backslash:
            value_start = key_len + 1
            break
        backslash = (not backslash) if c == "\\" else False
        key_len += 1
    while value_start < n:
        c = line[value_start]
        if c not in " \t\f":
            if not has_sep and c in "=:":
                has_sep = True
            else:
                break
        value_start += 1
    return line[:key_len], line[value_start:]


def loads(text):
    """Parse .properties text into an insertion-ordered dict (later keys win)."""
    props = {}
    for line in _logical_lines(text):
        key, value = _split(line)
        props[_unescape(key)] = _unescape(value)
    return props


def load_bytes(data):
    """Parse the bytes of a .properties file (ISO-8859-1, as Java reads it)."""
    return loads(data.decode("latin-1"))


def _unicode(c):
    data = c.encode("utf-16-be", "surrogatepass")
    return "".join("\\u%04X" % int.from_bytes(data[k : k + 2], "big") for k in range(0, len(data), 2))


def _escape(s, is_key):
    out = []
    for i, c in enumerate(s):
        if c == " ":
            out.append("\\ " if is_key or i == 0 else " ")
        elif c in _ESCAPE:
            out.append(_ESCAPE[c])
        elif c < " " or c > "~":
            out.append(_unicode(c))
        else:
            out.append(c)
    return "".join(out)


def _comment(text):
    out = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        esc = "".join(c if " " <= c <= "~" else _unicode(c) for c in line)
        out.append(esc if esc[:1] in ("#", "!") else "#" + esc)
    return out


def java_date_string(when=None):
    """java.util.Date.toString() in UTC: 'Thu Apr 18 22:32:13 UTC 2024'."""
    when = when or datetime.datetime.now(datetime.timezone.utc)
    when = when.astimezone(datetime.timezone.utc)
    return f"{_DAYS[when.weekday()]} {_MONTHS[when.month - 1]} {when.day:02d} {when:%H:%M:%S} UTC {when.year}"


def java_instant_string(when=None):
    """java.time.Instant.toString(): '2024-04-18T22:32:13.522Z' (0, 3 or 6 fraction digits)."""
    when = (when or datetime.datetime.now(datetime.timezone.utc)).astimezone(datetime.timezone.utc)
    us = when.microsecond
    frac = "" if not us else f".{us // 1000:03d}" if us % 1000 == 0 else f".{us:06d}"
    return f"{when:%Y-%m-%dT%H:%M:%S}{frac}Z"


def dumps(props, comments=None, when=None):
    """Properties.store text: optional comment lines, a '#<Date.toString()>' line, then escaped key=value lines."""
    lines = _comment(comments) if comments is not None else []
    lines.append("#" + java_date_string(when))
    for key, value in props.items():
        lines.append(_escape(str(key), True) + "=" + _escape(str(value), False))
    return "\n".join(lines) + "\n"


def store_comment(when=None):
    """The comment Hudi passes when saving hoodie.properties."""
    return "Properties saved on " + java_instant_string(when)
