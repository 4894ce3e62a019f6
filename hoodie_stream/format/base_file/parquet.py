"""Parquet base files: meta columns first, then data columns; Hudi footer metadata (bloom filter, key range)."""

import contextlib
import threading
from concurrent.futures import Future

import pyarrow as pa

# pyarrow.parquet is imported by the functions that use it: the write chain's workers never need to load it
import pyarrow.compute as pc

from ...errors import HoodieConfigError, HoodieFormatError
from ...storage import storage_for
from ..avro.schema import META_FIELDS
from ..util.string_buffers import utf8_buffers
from .bloom_filter import TYPE_CODE, BloomFilter

BLOOM_FILTER_KEY = "org.apache.hudi.bloomfilter"
BLOOM_TYPE_CODE_KEY = "hoodie_bloom_filter_type_code"
MIN_KEY = "hoodie_min_record_key"
MAX_KEY = "hoodie_max_record_key"
AVRO_SCHEMA_KEY = "parquet.avro.schema"
WRITER_MODEL_KEY = "writer.model.name"
DEFAULT_COMPRESSION = "gzip"
# hoodie.parquet.compression.codec values (Hudi's names, read case-insensitively as parquet-mr's
# CompressionCodecName.fromConf reads them) -> pyarrow's codec and the level parquet-mr compresses with by default:
# zlib's default (6) for gzip (pyarrow's own default, 9, is several times slower), 3 for zstd. lz4 is written as
# parquet's LZ4_RAW, the only LZ4 pyarrow writes (parquet-mr writes the deprecated Hadoop-framed LZ4).
PARQUET_CODECS = {
    "gzip": ("gzip", 6),
    "snappy": ("snappy", None),
    "zstd": ("zstd", 3),
    "lz4": ("lz4", None),
    "uncompressed": ("none", None),
}


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


def parquet_compression(codec):
    """pyarrow's `compression` and `compression_level` for a Hudi parquet codec name (see PARQUET_CODECS)."""
    try:
        compression, level = PARQUET_CODECS[codec.lower()]
    except (KeyError, AttributeError):
        raise HoodieConfigError(f"parquet codec must be one of {tuple(PARQUET_CODECS)}, got {codec!r}") from None
    return {"compression": compression, "compression_level": level}


def key_range(keys):
    """(min, max) record key in Java String order (UTF-16 code units, as Hudi's write support compares)."""
    if _has_supplementary(keys):
        ordered = sorted(keys.to_pylist(), key=lambda k: k.encode("utf-16-be"))
        return ordered[0], ordered[-1]
    bounds = pc.min_max(keys)
    return bounds["min"].as_py(), bounds["max"].as_py()


def _has_supplementary(keys):
    """True when a key may hold a character outside the Basic Multilingual Plane (a 4-byte UTF-8 sequence, whose
    lead byte is 0xF0 or more): there UTF-16 order and code point order differ. A look at the keys' bytes."""
    data, offsets = utf8_buffers(keys, "record keys")
    return bool(data[offsets[0] : offsets[-1]].max(initial=0) >= 0xF0)


def _ordered(table):
    missing = [m for m in META_FIELDS if m not in table.column_names]
    if missing:
        raise HoodieFormatError(f"base file table lacks meta columns {missing}")
    data = [c for c in table.column_names if c not in META_FIELDS]
    table = table.select(META_FIELDS + data)
    fields = [pa.field(m, pa.string()) for m in META_FIELDS] + [table.schema.field(c) for c in data]
    columns = [table[m].cast(pa.string()) for m in META_FIELDS] + [table[c] for c in data]
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def write_base_file(
    storage,
    path,
    table,
    *,
    record_key_col="_hoodie_record_key",
    avro_schema_json=None,
    compression=DEFAULT_COMPRESSION,
    bloom_filter=True,
):
    """Write table (meta columns are moved first) as a Hudi base file at `path` (relative to the storage root),
    atomically.

    `compression` is a Hudi parquet codec name (PARQUET_CODECS). Footers: bloom filter + min/max record key (when
    bloom_filter and the key column is populated), parquet.avro.schema and writer.model.name=avro when
    avro_schema_json is given. Timestamps are stored as
    INT64 microseconds and decimals of precision <= 18 as INT32/INT64, as Spark writes them.
    Returns the size in bytes of the written file.
    """
    import pyarrow.parquet as pq

    storage = storage_for(storage)
    table = _ordered(table)
    meta = dict(table.schema.metadata or {})
    keys = table[record_key_col]
    if bloom_filter and keys.null_count == 0:
        meta.update({k.encode(): v.encode() for k, v in footer_metadata(keys).items()})
    if avro_schema_json is not None:
        meta[AVRO_SCHEMA_KEY.encode()] = avro_schema_json.encode()
        meta[WRITER_MODEL_KEY.encode()] = b"avro"
    table = table.replace_schema_metadata(meta)
    with storage.open_output(path) as f:
        pq.write_table(table, f, **_WRITE_OPTIONS, **parquet_compression(compression))
        f.flush()
        return f.tell()


_WRITE_OPTIONS = {
    "coerce_timestamps": "us",
    "allow_truncated_timestamps": True,
    "store_decimal_as_integer": True,
    "use_compliant_nested_type": True,
    "write_statistics": True,
}


def read_base_file(storage, path, columns=None, filters=None):
    """Read a base file as an Arrow table (optionally a column subset / pyarrow filters)."""
    import pyarrow.parquet as pq

    storage = storage_for(storage)
    with storage.open_input(path) as f, _named(storage, path):
        return pq.read_table(f, columns=columns, filters=filters)


@contextlib.contextmanager
def parquet_file(storage, path):
    """`with parquet_file(storage, path) as pf`: a `pyarrow.parquet.ParquetFile` of the base file at `path`, to read
    row groups or batches; the file is closed when the block ends (a ParquetFile given an open file leaves it open)."""
    import pyarrow.parquet as pq

    storage = storage_for(storage)
    with storage.open_input(path) as source:
        with _named(storage, path):
            pf = pq.ParquetFile(source)
        with pf:
            yield pf


@contextlib.contextmanager
def _named(storage, path):
    """pyarrow's error for a file that is not Parquet (it names no file) as a HoodieFormatError naming it."""
    try:
        yield
    except pa.ArrowInvalid as exc:
        raise HoodieFormatError(f"{storage.uri_of(path)}: not a readable Parquet base file: {exc}") from exc


def read_footer(storage, path):
    """Key/value footer metadata of a parquet file as str -> str."""
    with parquet_file(storage, path) as pf:
        md = pf.metadata.metadata or {}
    return {k.decode("utf-8"): v.decode("utf-8") for k, v in md.items()}


def read_bloom_filter(storage, path):
    """The file's bloom filter, or None when the footer has none."""
    text = read_footer(storage, path).get(BLOOM_FILTER_KEY)
    return BloomFilter.deserialize(text) if text else None


class BaseFileWriter:
    """Write a base file in chunks (bounded memory): row groups as they come, Hudi footers at close.

    A chunk is written in two threads started for it while the caller prepares the next one: one encodes and
    compresses its rows, the other adds its keys to the bloom filter and the min/max record key (both are sums over
    the chunks, in order). `in_flight` chunks at most are in flight: write() first waits for the oldest beyond that
    (each chunk's threads start its work once the chunk before it is done, so the file holds the chunks in order),
    and no thread outlives its chunk. The file appears under its name only when close() succeeds (the storage's
    atomic output); abort() discards it. `compression`: a Hudi parquet codec name. `bloom`: a bloom filter to start
    from (a compaction's base file holds the keys of the file it replaces: their filter is taken over, and only the
    keys it lacks are added; a filter of more keys than the file holds only answers "maybe" more often, as Hudi
    allows)."""

    def __init__(
        self,
        storage,
        path,
        schema,
        *,
        avro_schema_json=None,
        compression=DEFAULT_COMPRESSION,
        bloom=None,
        in_flight=1,
    ):
        import pyarrow.parquet as pq

        self.storage = storage_for(storage)
        self.path = path
        self.schema = _ordered(schema.empty_table()).schema
        self.avro_schema_json = avro_schema_json
        self.bloom = bloom if bloom is not None else BloomFilter()
        self.min_key = self.max_key = None
        self.rows = 0
        options = parquet_compression(compression)
        self.max_in_flight = max(1, in_flight)
        self._in_flight = []  # (write, keys) futures of each chunk in flight, oldest first
        self._output = contextlib.ExitStack()
        self._file = self._output.enter_context(self.storage.open_output(path))
        self._writer = pq.ParquetWriter(self._file, self.schema, **options, **_WRITE_OPTIONS)

    def write(self, table, bloom_keys=None):
        """Write the rows of `table`; `bloom_keys` (an Arrow string array): the keys of these rows that the bloom
        filter lacks (None: all of them)."""
        if table.num_rows == 0:
            return
        while len(self._in_flight) >= self.max_in_flight:
            self._wait(oldest=True)
        table = _ordered(table).cast(self.schema)
        keys = table["_hoodie_record_key"].combine_chunks()
        if keys.null_count:
            raise HoodieFormatError(f"{self.storage.uri_of(self.path)}: records need a non-null _hoodie_record_key")
        before = self._in_flight[-1] if self._in_flight else (None, None)
        self._in_flight.append(
            (
                _in_thread(_after, before[0], self._writer.write_table, table),
                _in_thread(_after, before[1], self._add_keys, keys, keys if bloom_keys is None else bloom_keys),
            )
        )
        self.rows += table.num_rows

    def _wait(self, oldest=False):
        """Wait for the chunks in flight (or the oldest one); the first error is raised once they have ended."""
        if oldest:
            chunks, self._in_flight = self._in_flight[:1], self._in_flight[1:]
        else:
            chunks, self._in_flight = self._in_flight, []
        error = None
        for done in [f for chunk in chunks for f in chunk]:
            try:
                done.result()
            except BaseException as exc:  # the others are still waited for: no thread outlives the writer
                error = error or exc
        if error is not None:
            raise error

    def _add_keys(self, keys, bloom_keys):
        for start in range(0, len(bloom_keys), _BLOOM_CHUNK):
            self.bloom.add_keys(bloom_keys.slice(start, _BLOOM_CHUNK))
        low, high = key_range(keys)
        if self.min_key is None or _java_less(low, self.min_key):
            self.min_key = low
        if self.max_key is None or _java_less(self.max_key, high):
            self.max_key = high

    def close(self):
        """Finish the file; returns its size in bytes."""
        try:
            self._wait()
            meta = {BLOOM_FILTER_KEY: self.bloom.serialize(), BLOOM_TYPE_CODE_KEY: TYPE_CODE}
            if self.min_key is not None:
                meta[MIN_KEY], meta[MAX_KEY] = self.min_key, self.max_key
            if self.avro_schema_json is not None:
                meta[AVRO_SCHEMA_KEY] = self.avro_schema_json
                meta[WRITER_MODEL_KEY] = "avro"
            self._writer.add_key_value_metadata(meta)
            self._writer.close()
            self._file.flush()
            size = self._file.tell()
        except BaseException:
            self.abort()
            raise
        self._output.close()
        return size

    def abort(self):
        for chunk in self._in_flight:
            for pending in chunk:
                try:
                    pending.result()
                except BaseException:
                    pass
        self._in_flight = []
        try:
            self._writer.close()
        except Exception:
            pass
        # leaving the output with an error discards the file
        self._output.__exit__(HoodieFormatError, HoodieFormatError("aborted"), None)


# keys hashed into the bloom filter at a time: the hashes of a chunk stay in the CPU caches
_BLOOM_CHUNK = 65_536


def _in_thread(fn, *args):
    """fn(*args) run in a thread of its own (which inherits the caller's CPU priority); a Future of its result."""
    done = Future()

    def run():
        try:
            done.set_result(fn(*args))
        except BaseException as exc:  # re-raised where the writer waits for the chunk
            done.set_exception(exc)

    threading.Thread(target=run, name="hoodie-base-file", daemon=True).start()
    return done


def _after(before, fn, *args):
    """fn(*args) once the Future `before` (the same work of the chunk before; None: none) is done; a failure of
    that chunk is this one's too (the file would miss its rows)."""
    if before is not None:
        before.result()
    return fn(*args)


def _java_less(a, b):
    return a.encode("utf-16-be") < b.encode("utf-16-be")
