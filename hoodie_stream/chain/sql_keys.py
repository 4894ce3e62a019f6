"""Record keys as Spark SQL expressions, for stages that shuffle by key group before any Python task has seen the
records (bulk insert: one shuffle, the records read by Python only once, in the write tasks).

A key group is `pmod(xxhash64(record key), key groups)` of the key's UTF-8 text (`key_groups.py`), so Spark can
route a record only when it renders the key exactly as the table's key generator does (`format/record/keygen.py`). That
holds for the key generators' plain renderings of string and integral columns: a string is the key as it is, an
integer's decimal text is Spark's `cast(... as string)`; complex keys are `field:value` parts joined by commas,
with `__null__` and `__empty__` for null and empty values. Anything else (floating point, decimal, date and
timestamp keys, nested fields, key generators of other kinds) has no expression here: the records are keyed by
the Python key-by stage first. Records whose key is null or empty get some key group; the write task refuses
them with the key generator's own error.
"""

from ..format.record.keygen import (
    EMPTY_PLACEHOLDER,
    NULL_PLACEHOLDER,
    ComplexKeyGenerator,
    GlobalDeleteKeyGenerator,
    KeyGenerator,
    NonpartitionedKeyGenerator,
    SimpleKeyGenerator,
)

# Spark type names (DataType.typeName()) whose cast to string is the key generator's rendering
_PLAIN_TYPES = {"string", "byte", "short", "integer", "long"}
# key generators whose record_keys are KeyGenerator's simple / complex renderings
_KNOWN = (KeyGenerator, SimpleKeyGenerator, ComplexKeyGenerator, NonpartitionedKeyGenerator, GlobalDeleteKeyGenerator)


def quoted(name):
    """A column name as Spark parses it literally (dots, spaces and backquotes included)."""
    return "`" + name.replace("`", "``") + "`"


def _literal(text):
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _is_complex(keygen):
    """Whether the key generator renders `field:value,...` keys (else the single field's value)."""
    if isinstance(keygen, GlobalDeleteKeyGenerator):
        return True
    if isinstance(keygen, ComplexKeyGenerator):
        return not (keygen.new_encoding and len(keygen.record_key_fields) == 1)
    if isinstance(keygen, SimpleKeyGenerator):
        return False
    return len(keygen.record_key_fields) > 1


def record_key_sql(keygen, type_names):
    """A Spark SQL expression of the record key as `keygen` renders it, or None when Spark cannot render it the
    same. `type_names`: {top-level column name: Spark type name} of the micro-batch."""
    if type(keygen) not in _KNOWN:  # a subclass may render keys its own way
        return None
    fields = keygen.record_key_fields
    if any(type_names.get(f) not in _PLAIN_TYPES for f in fields):
        return None
    if not _is_complex(keygen):
        return f"cast({quoted(fields[0])} as string)"
    parts = []
    for f in fields:
        value = f"cast({quoted(f)} as string)"
        shown = (
            f"CASE WHEN {value} IS NULL THEN {_literal(NULL_PLACEHOLDER)} "
            f"WHEN {value} = '' THEN {_literal(EMPTY_PLACEHOLDER)} ELSE {value} END"
        )
        parts.append(f"concat({_literal(f + ':')}, {shown})")
    return f"concat_ws(',', {', '.join(parts)})"


def sortable_fields(fields, type_names):
    """The fields as Spark sort columns (quoted), or None when one is not a top-level column of an atomic type."""
    atomic = _PLAIN_TYPES | {"boolean", "float", "double", "date", "timestamp", "timestamp_ntz", "decimal"}
    if any(type_names.get(f, "").split("(")[0] not in atomic for f in fields):
        return None
    return [quoted(f) for f in fields]
