"""Parquet base files: meta columns first, then data columns; Hudi footer metadata (bloom filter, key range)."""

import os
import uuid

import pyarrow as pa

# pyarrow.parquet is imported by the functions that use it: the write chain's workers never need to load it
import pyarrow.compute as pc

from .bloom_filter import TYPE_CODE, BloomFilter
from ..errors import HoodieFormatError

try:
    from .avro_schema import META_FIELDS
except ImportError:  # avro_schema not present yet
    META_FIELDS = ["_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key",
                   "_hoodie_partition_path", "_hoodie_file_name"]

BLOOM_FILTER_KEY = "org.apache.hudi.bloomfilter"
BLOOM_TYPE_CODE_KEY = "hoodie_bloom_filter_type_code"
MIN_KEY = "hoodie_min_record_key"
MAX_KEY = "hoodie_max_record_key"
AVRO_SCHEMA_KEY = "parquet.avro.schema"
WRITER_MODEL_KEY = "writer.model.name"
DEFAULT_COMPRESSION = "gzip"


def footer_metadata(record_keys, avro_schema_json=None):
    """Hudi footer key/values for a file holding record_keys (non-null strings)."""
    keys = record_keys.combine_chunks() if isinstance(record_keys, pa.ChunkedArray) else record_keys
    if keys.null_count:
        raise HoodieFormatError("base file records need a non-null _hoodie_record_key for the bloom filter")
    meta = {
        BLOOM_FILTER_KEY: BloomFilter().add_keys(keys).serialize(),
        BLOOM_TYPE_CODE_KEY: TYPE_CODE,
    }
    if len(keys):
        meta[MIN_KEY], meta[MAX_KEY] = key_range(keys)
    if avro_schema_json is not None:
        meta[AVRO_SCHEMA_KEY] = avro_schema_json
        meta[WRITER_MODEL_KEY] = "avro"
    return meta


def key_range(keys):
    """(min, max) record key in Java String order (UTF-16 code units, as Hudi's write support compares)."""
    if pc.any(pc.match_substring_regex(keys, "[\\x{10000}-\\x{10FFFF}]")).as_py():
        ordered = sorted(keys.to_pylist(), key=lambda k: k.encode("utf-16-be"))
        return ordered[0], ordered[-1]
    bounds = pc.min_max(keys)
    return bounds["min"].as_py(), bounds["max"].as_py()


def _ordered(table):
    missing = [m for m in META_FIELDS if m not in table.column_names]
    if missing:
        raise HoodieFormatError(f"base file table lacks meta columns {missing}")
    data = [c for c in table.column_names if c not in META_FIELDS]
    table = table.select(META_FIELDS + data)
    fields = [pa.field(m, pa.string()) for m in META_FIELDS] + [table.schema.field(c) for c in data]
    columns = [table[m].cast(pa.string()) for m in META_FIELDS] + [table[c] for c in data]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def write_base_file(path, table, *, record_key_col="_hoodie_record_key", avro_schema_json=None,
                    compression=DEFAULT_COMPRESSION, bloom_filter=True):
    """Write table (meta columns are moved first) as a Hudi base file via a temp name + rename.

    Footers: bloom filter + min/max record key (when bloom_filter and the key column is populated),
    parquet.avro.schema and writer.model.name=avro when avro_schema_json is given. Timestamps are stored as
    INT64 microseconds and decimals of precision <= 18 as INT32/INT64, as Spark writes them.
    Returns the size in bytes of the written file.
    """
    import pyarrow.parquet as pq
    path = os.fspath(path)
    table = _ordered(table)
    meta = dict(table.schema.metadata or {})
    keys = table[record_key_col]
    if bloom_filter and keys.null_count == 0:
        meta.update({k.encode(): v.encode() for k, v in footer_metadata(keys).items()})
    if avro_schema_json is not None:
        meta[AVRO_SCHEMA_KEY.encode()] = avro_schema_json.encode()
        meta[WRITER_MODEL_KEY.encode()] = b"avro"
    table = table.replace_schema_metadata(meta)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(
            table, tmp,
            compression=compression,
            coerce_timestamps="us",
            allow_truncated_timestamps=True,
            store_decimal_as_integer=True,
            use_compliant_nested_type=True,
            write_statistics=True,
        )
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return os.path.getsize(path)


def read_base_file(path, columns=None, filters=None):
    """Read a base file as an Arrow table (optionally a column subset / pyarrow filters)."""
    import pyarrow.parquet as pq
    return pq.read_table(os.fspath(path), columns=columns, filters=filters)


def read_footer(path):
    """Key/value footer metadata of a parquet file as str -> str."""
    import pyarrow.parquet as pq
    md = pq.ParquetFile(os.fspath(path)).metadata.metadata or {}
    return {k.decode("utf-8"): v.decode("utf-8") for k, v in md.items()}


def read_bloom_filter(path):
    """The file's bloom filter, or None when the footer has none."""
    text = read_footer(path).get(BLOOM_FILTER_KEY)
    return BloomFilter.deserialize(text) if text else None


class BaseFileWriter:
    """Write a base file in chunks (bounded memory): row groups as they come, Hudi footers at close.

    The bloom filter and min/max record key accumulate over the chunks; the file appears under its name only
    when close() succeeds (temp name + rename). abort() removes the temp file.
    """

    def __init__(self, path, schema, *, avro_schema_json=None, compression=DEFAULT_COMPRESSION):
        import pyarrow.parquet as pq
        self.path = os.fspath(path)
        directory, name = os.path.split(self.path)
        self.tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")
        self.schema = _ordered(schema.empty_table()).schema
        self.avro_schema_json = avro_schema_json
        self.bloom = BloomFilter()
        self.min_key = self.max_key = None
        self.rows = 0
        self._writer = pq.ParquetWriter(
            self.tmp, self.schema, compression=compression, coerce_timestamps="us",
            allow_truncated_timestamps=True, store_decimal_as_integer=True, use_compliant_nested_type=True,
            write_statistics=True)

    def write(self, table):
        if table.num_rows == 0:
            return
        table = _ordered(table).cast(self.schema)
        keys = table["_hoodie_record_key"].combine_chunks()
        if keys.null_count:
            raise HoodieFormatError(f"{self.path}: records need a non-null _hoodie_record_key")
        self.bloom.add_keys(keys)
        low, high = key_range(keys)
        if self.min_key is None or _java_less(low, self.min_key):
            self.min_key = low
        if self.max_key is None or _java_less(self.max_key, high):
            self.max_key = high
        self._writer.write_table(table)
        self.rows += table.num_rows

    def close(self):
        meta = {BLOOM_FILTER_KEY: self.bloom.serialize(), BLOOM_TYPE_CODE_KEY: TYPE_CODE}
        if self.min_key is not None:
            meta[MIN_KEY], meta[MAX_KEY] = self.min_key, self.max_key
        if self.avro_schema_json is not None:
            meta[AVRO_SCHEMA_KEY] = self.avro_schema_json
            meta[WRITER_MODEL_KEY] = "avro"
        try:
            self._writer.add_key_value_metadata(meta)
            self._writer.close()
            os.replace(self.tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return os.path.getsize(self.path)

    def abort(self):
        try:
            self._writer.close()
        except Exception:
            pass
        if os.path.exists(self.tmp):
            os.remove(self.tmp)


def _java_less(a, b):
    return a.encode("utf-16-be") < b.encode("utf-16-be")
