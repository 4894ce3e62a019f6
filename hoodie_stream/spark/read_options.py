"""The options of `spark.read.format("hoodie")` and `spark.readStream.format("hoodie")`, in Hudi's names.

Every option is checked when the source is created: a key that is neither a read option below nor a storage
option of the storage layer (`hoodie_stream.storage.options`: `aws_*`, `google_*`, `azure_*`, the client and retry
keys) is refused with its name, rather than silently ignored (a misspelt `as.of.instant` would otherwise read the
latest snapshot). Keys are case-insensitive, as Spark passes them.

The storage of an `s3://` table is resolved as HoodieStreamSink resolves it (`storage.options.resolve`): the storage
options given as reader options, else the environment, else the Spark session's `spark.hadoop.fs.s3a.*` settings,
which `data_source.register(spark)` hands to the reads (`ReadOptions.session_storage_options`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import HoodieConfigError
from ..format.read.table_reader import QUERY_TYPES
from ..options import boolean
from ..storage import Storage, storage_for
from ..storage.options import CLIENT_KEYS, RETRY_KEYS, store_kind

PATH = "path"
QUERY_TYPE = "hoodie.datasource.query.type"
AS_OF_INSTANT = "as.of.instant"
BEGIN_INSTANTTIME = "hoodie.datasource.read.begin.instanttime"
END_INSTANTTIME = "hoodie.datasource.read.end.instanttime"
MAX_SPLIT_BYTES = "hoodie.datasource.read.max.split.bytes"
# incremental queries: the latest state of the records written (latest_state, the default) or the changelog (cdc)
INCREMENTAL_FORMAT = "hoodie.datasource.query.incremental.format"
INCREMENTAL_FORMATS = ("latest_state", "cdc")
# hoodie-stream's own: the changelog as rows (op, ts_ms, then the row's typed columns) instead of Hudi's JSON images
CDC_FLAT = "hoodie.stream.read.cdc.flat"
# streaming reads
START_OFFSET = "hoodie.datasource.streaming.startOffset"
MAX_COMMITS = "hoodie.datasource.read.streaming.max.commits"
MAX_FILES = "hoodie.datasource.read.streaming.max.files"

BATCH_OPTIONS = (
    QUERY_TYPE,
    AS_OF_INSTANT,
    BEGIN_INSTANTTIME,
    END_INSTANTTIME,
    MAX_SPLIT_BYTES,
    INCREMENTAL_FORMAT,
    CDC_FLAT,
)
STREAM_OPTIONS = (START_OFFSET, MAX_COMMITS, MAX_FILES, MAX_SPLIT_BYTES, QUERY_TYPE, INCREMENTAL_FORMAT, CDC_FLAT)
DEFAULT_MAX_SPLIT_BYTES = 128 * 1024 * 1024  # as Spark's spark.sql.files.maxPartitionBytes
_STORAGE_PREFIXES = ("aws_", "google_", "azure_")
# Hudi's query type values, with the Java constants' spellings
_QUERY_TYPES = {"snapshot": "snapshot", "read_optimized": "read_optimized", "incremental": "incremental"}


@dataclass(frozen=True)
class ReadOptions:
    """The parsed options of one `load(path)`. Instants are kept as given: they are parsed against the table's
    timeline timezone when the table is opened (`instant.parse_instant_time`)."""

    path: str
    query_type: str = "snapshot"
    as_of: str | None = None
    begin: str | None = None
    end: str | None = None
    max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES
    incremental_format: str = "latest_state"
    cdc_flat: bool = False
    start_offset: str = "earliest"
    max_commits: int | None = None
    max_files: int | None = None
    # storage options hold secrets: kept out of the repr
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)
    # the registering session's `spark.hadoop.fs.s3a.*` settings as storage options (the fallback of s3 tables)
    session_storage_options: dict[str, str] = field(default_factory=dict, repr=False)


def table_storage(options: ReadOptions) -> Storage:
    """The storage of the table at `options.path`, its options resolved as the sink's: the storage options given,
    else the environment, else (s3 tables) the session's s3a settings."""
    fallback = options.session_storage_options if store_kind(options.path) == "s3" else None
    return storage_for(options.path, options.storage_options or None, fallback or None)


def is_storage_option(key: str) -> bool:
    return key.startswith(_STORAGE_PREFIXES) or key in CLIENT_KEYS or key in RETRY_KEYS


def parse_options(options: Mapping[str, str], streaming: bool | None = None) -> ReadOptions:
    """ReadOptions from Spark's option map; HoodieConfigError naming the first option that is not understood.
    `streaming`: True for readStream, False for read, None when not known yet (`DataSource.schema`, called for
    both: then the options of either kind pass)."""
    allowed = BATCH_OPTIONS if streaming is False else STREAM_OPTIONS if streaming else BATCH_OPTIONS + STREAM_OPTIONS
    known = {k.lower(): k for k in BATCH_OPTIONS + STREAM_OPTIONS}
    values: dict[str, str] = {}
    storage: dict[str, str] = {}
    path = None
    for key, value in options.items():
        lower = key.lower()
        if lower == PATH:
            path = value
        elif lower in known:
            name = known[lower]
            if name not in allowed:
                kind = "streaming reads (spark.readStream)" if name in STREAM_OPTIONS else "batch reads (spark.read)"
                raise HoodieConfigError(f'format("hoodie"): option {key!r} applies to {kind} only')
            values[name] = str(value)
        elif is_storage_option(lower):
            storage[lower] = str(value)
        else:
            raise HoodieConfigError(
                f'format("hoodie"): unknown option {key!r}; the read options are '
                f"{', '.join(sorted(set(allowed)))}, plus storage options (aws_*, google_*, azure_*, client keys)"
            )
    if not path:
        raise HoodieConfigError('format("hoodie"): no table path; give it to load(path)')
    query_type = _QUERY_TYPES.get(values.get(QUERY_TYPE, "snapshot").strip().lower())
    if query_type is None:
        raise HoodieConfigError(f"{QUERY_TYPE} must be one of {QUERY_TYPES}, got {values[QUERY_TYPE]!r}")
    if query_type == "incremental" and streaming is not True:
        if AS_OF_INSTANT in values:
            raise HoodieConfigError(
                f"{AS_OF_INSTANT} applies to snapshot and read_optimized queries; use "
                f"{BEGIN_INSTANTTIME} / {END_INSTANTTIME} for an incremental query"
            )
        if BEGIN_INSTANTTIME not in values and streaming is False:
            raise HoodieConfigError(f"an incremental query needs {BEGIN_INSTANTTIME} (the instant to read after)")
    elif BEGIN_INSTANTTIME in values or END_INSTANTTIME in values:
        raise HoodieConfigError(
            f"{BEGIN_INSTANTTIME} / {END_INSTANTTIME} apply to incremental queries ({QUERY_TYPE}=incremental); use "
            f"{AS_OF_INSTANT} for time travel"
        )
    incremental_format = values.get(INCREMENTAL_FORMAT, "latest_state").strip().lower()
    if incremental_format not in INCREMENTAL_FORMATS:
        raise HoodieConfigError(
            f"{INCREMENTAL_FORMAT} must be one of {INCREMENTAL_FORMATS}, got {values[INCREMENTAL_FORMAT]!r}"
        )
    if incremental_format == "cdc" and query_type != "incremental":
        raise HoodieConfigError(
            f"{INCREMENTAL_FORMAT}=cdc (the changelog query) needs {QUERY_TYPE}=incremental, as in Hudi; "
            f"got {QUERY_TYPE}={query_type}"
        )
    flat = boolean(CDC_FLAT, values.get(CDC_FLAT, "false"))
    if flat and incremental_format != "cdc":
        raise HoodieConfigError(f"{CDC_FLAT} applies to changelog queries ({INCREMENTAL_FORMAT}=cdc)")
    return ReadOptions(
        path=str(path),
        query_type=query_type,
        incremental_format=incremental_format,
        cdc_flat=flat,
        as_of=values.get(AS_OF_INSTANT),
        begin=values.get(BEGIN_INSTANTTIME),
        end=values.get(END_INSTANTTIME),
        max_split_bytes=_positive(values, MAX_SPLIT_BYTES) or DEFAULT_MAX_SPLIT_BYTES,
        start_offset=values.get(START_OFFSET, "earliest"),
        max_commits=_positive(values, MAX_COMMITS),
        max_files=_positive(values, MAX_FILES),
        storage_options=storage,
    )


def _positive(values: Mapping[str, str], key: str) -> int | None:
    text = values.get(key)
    if text is None:
        return None
    try:
        number = int(text)
    except ValueError:
        number = 0
    if number <= 0:
        raise HoodieConfigError(f"{key} must be a positive integer, got {text!r}")
    return number
