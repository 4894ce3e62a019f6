"""Sink options: Hudi's (and Hudi Flink's) key names, their defaults, and validation that fails fast.

Every option is declared once, as a field of `SinkOptions` or `CompactionOptions`: `option(key, default, parse)`
gives the field its default (the option's default text, parsed) and records the `Option` (key, default text,
parser, doc, aliases) in the field's metadata; parsing a dict of options goes over the fields. A parser takes the
option's key and its text and returns the field's value, or raises HoodieConfigError naming the option.

An option may have aliases: the other names Hudi gives it, as Hudi's Flink writer accepts them
(`FlinkOptions...withFallbackKeys`, and the `hoodie.*` write-config keys it passes through), e.g.
`clean.retain_commits` is also `hoodie.clean.commits.retained` (Hudi 1.x) and `hoodie.cleaner.commits.retained`
(Hudi 0.x). The declared key wins over its aliases, an alias over the aliases after it; a name that loses to a
different value is logged as a warning. An alias may have a parser of its own (another unit, an inverted flag).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import HoodieConfigError
from .format.base_file.parquet import PARQUET_CODECS
from .format.cdc.query import logging_mode

T = TypeVar("T")
Parser = Callable[[str, str], Any]  # (key, text) -> value
logger = logging.getLogger(__name__)

MB = 1024 * 1024
TRIGGER_STRATEGIES = ("num_commits", "time_elapsed", "num_and_time", "num_or_time")
CLEAN_POLICIES = ("KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS")
OPERATIONS = ("upsert", "insert", "bulk_insert", "delete")
# options passed through to the key generator as they are (SinkOptions.raw)
_PREFIXES_PASSED_THROUGH = ("hoodie.keygen.timebased.", "hoodie.write.complex.keygen.")
# keyword shortcuts of HoodieStreamSink(path, options, **shortcuts)
SHORTCUTS = {
    "record_key": "hoodie.datasource.write.recordkey.field",
    "precombine_field": "hoodie.datasource.write.precombine.field",
    "partition_fields": "hoodie.datasource.write.partitionpath.field",
    "table_name": "hoodie.table.name",
    "operation": "hoodie.datasource.write.operation",
    "hive_style": "hoodie.datasource.write.hive_style_partitioning",
}


@dataclass(frozen=True)
class Alias:
    """Another name of an option; `parse` (when the alias's value means something else: another unit, the
    inverse flag) turns its text into the option's value, else the option's parser reads it."""

    key: str
    parse: Parser | None = None


@dataclass(frozen=True)
class Option:
    """One option: its key, its default as text (None: unset), its parser, what it does and its aliases."""

    key: str
    default: str | None
    parse: Parser
    doc: str = ""
    aliases: tuple[Alias, ...] = ()

    @property
    def keys(self) -> tuple[str, ...]:
        """The key, then the aliases' keys, by precedence."""
        return (self.key, *(a.key for a in self.aliases))

    def value(self, text: str | None) -> Any:
        """The parsed value of `text` (None stays None)."""
        return None if text is None else self.parse(self.key, text)

    def read(self, given: Mapping[str, str]) -> Any:
        """The value `given` sets by the key or an alias (the first of them given wins), else the default."""
        names = [(self.key, self.parse), *((a.key, a.parse or self.parse) for a in self.aliases)]
        found = [(key, parse) for key, parse in names if key in given]
        if not found:
            return self.value(self.default)
        values = [(key, parse(key, given[key])) for key, parse in found]
        key, value = values[0]
        for other, other_value in values[1:]:
            if other_value != value:
                logger.warning(
                    "options %r=%r and %r=%r name the same option with different values; %r is used",
                    key,
                    given[key],
                    other,
                    given[other],
                    key,
                )
        return value


def option(key: str, default: str | None, parse: Parser, doc: str = "", aliases: Sequence[str | Alias] = ()) -> Any:
    """A dataclass field read from option `key` (or one of its `aliases`), whose default is `default` parsed."""
    spec = Option(key, default, parse, doc, tuple(a if isinstance(a, Alias) else Alias(a) for a in aliases))
    value = spec.value(default)
    if isinstance(value, list):
        return field(default_factory=lambda: list(value), metadata={"option": spec})
    return field(default=value, metadata={"option": spec})


def options_of(cls: type) -> dict[str, Option]:
    """{field name: Option} of an options dataclass, in field order."""
    return {f.name: f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata}


def _invalid(key: str, text: str, expected: str) -> HoodieConfigError:
    return HoodieConfigError(f"option {key!r} must be {expected}, got {text!r}")


# -- parsers -----------------------------------------------------------------------------------------------
def text(key: str, raw: str) -> str:
    return raw.strip()


def boolean(key: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise _invalid(key, raw, "true or false")
    return value == "true"


def integer(low: int = 1, high: float = math.inf) -> Parser:
    """An integer in [low, high] (by default: 1 and up); "5.0" reads as 5."""
    expected = "a positive integer" if (low, high) == (1, math.inf) else f"an integer from {low} to {high}"

    def parse(key: str, raw: str) -> int:
        try:
            value = float(raw.strip())
        except ValueError:
            raise _invalid(key, raw, expected) from None
        if not value.is_integer() or not low <= value <= high:
            raise _invalid(key, raw, expected)
        return int(value)

    return parse


def number(key: str, raw: str) -> float:
    """A positive finite number."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise _invalid(key, raw, "a positive number") from None
    if not math.isfinite(value) or value <= 0:
        raise _invalid(key, raw, "a positive number")
    return value


def names(key: str, raw: str) -> list[str]:
    """A comma-separated list of names (empty parts dropped)."""
    return [p.strip() for p in raw.split(",") if p.strip()]


def absolute_path(key: str, raw: str) -> str | None:
    """An absolute local path (each executor's own file system), or None when empty."""
    value = raw.strip()
    if value and (not value.startswith("/") or "://" in value):
        raise _invalid(key, raw, "an absolute local directory (on each executor's own disk)")
    return value or None


def inverted(key: str, raw: str) -> bool:
    """A boolean that means the opposite of the option it is an alias of (hoodie.compact.inline: not async)."""
    return not boolean(key, raw)


def clean_keys(name: str) -> tuple[str, str]:
    """Hudi's two names of a cleaning option: 1.x's `hoodie.clean.<name>`, then 0.x's `hoodie.cleaner.<name>`."""
    return (f"hoodie.clean.{name}", f"hoodie.cleaner.{name}")


def megabytes(parse: Parser) -> Parser:
    """A size given in MB, as bytes."""
    return lambda key, raw: int(parse(key, raw) * MB)


def one_of(choices: Sequence[str], normalize: Callable[[str], str]) -> Parser:
    """One of `choices`, compared after `normalize` (str.lower or str.upper)."""

    def parse(key: str, raw: str) -> str:
        value = normalize(raw.strip())
        if value not in choices:
            expected = choices[0] if len(choices) == 1 else f"one of {tuple(choices)}"
            raise HoodieConfigError(f"option {key!r} must be {expected}, got {value!r}")
        return value

    return parse


def parquet_codec(key: str, raw: str) -> str:
    """A parquet codec by Hudi's name, in any case (parquet-mr's CompressionCodecName.fromConf upper-cases it);
    empty means uncompressed, as in Hudi's writers."""
    value = raw.strip().lower() or "uncompressed"
    if value not in PARQUET_CODECS:
        raise _invalid(key, raw, f"one of {tuple(PARQUET_CODECS)} (in any case)")
    return value


def table_version(key: str, raw: str) -> int:
    """A table version written here: 6 (Hudi 0.14/0.15), 8 (Hudi 1.0) or 9 (Hudi 1.1, 1.2)."""
    value = raw.strip()
    if value not in ("6", "8", "9"):
        raise _invalid(key, raw, "6, 8 or 9 (the table versions of Hudi 0.14/0.15, 1.0 and 1.1/1.2)")
    return int(value)


def only(required: bool, reason: str) -> Parser:
    """A boolean the sink supports with one value only."""

    def parse(key: str, raw: str) -> bool:
        value = boolean(key, raw)
        if value != required:
            raise HoodieConfigError(f"option {key!r} must be {str(required).lower()}: {reason}")
        return value

    return parse


# -- the options -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompactionOptions:
    """Compaction and cleaning (Hudi Flink's option names; aliases: Hudi's write-config keys, HoodieCompactionConfig,
    HoodieCleanConfig and HoodieMemoryConfig, the Hudi 1.x name before the 0.x one)."""

    schedule: bool = option("compaction.schedule.enabled", "true", boolean)
    async_run: bool = option(
        "compaction.async.enabled",
        "true",
        boolean,
        aliases=("hoodie.datasource.compaction.async.enable", Alias("hoodie.compact.inline", inverted)),
    )
    trigger: str = option(
        "compaction.trigger.strategy",
        "num_commits",
        one_of(TRIGGER_STRATEGIES, str.lower),
        aliases=("hoodie.compact.inline.trigger.strategy",),
    )
    delta_commits: int = option(
        "compaction.delta_commits", "5", integer(), aliases=("hoodie.compact.inline.max.delta.commits",)
    )
    delta_seconds: int = option(
        "compaction.delta_seconds", "3600", integer(), aliases=("hoodie.compact.inline.max.delta.seconds",)
    )
    max_memory_bytes: int = option(
        "compaction.max_memory",
        "100",
        megabytes(integer()),
        "MB per compaction task",
        aliases=(Alias("hoodie.memory.compaction.max.size", integer()),),  # bytes
    )
    tasks: int | None = option("compaction.tasks", None, integer())
    target_io_mb: int | None = option(
        "compaction.target_io",
        None,
        integer(1),
        "MB read and written per compaction plan; unset: async compaction bounds plans by its measured pace",
        aliases=("hoodie.compaction.target.io",),
    )
    max_pending: int = option("hoodie.stream.compaction.max.pending", "2", integer())
    timeout_seconds: int = option(
        "compaction.timeout.seconds",
        "1200",
        integer(1),
        "how long a query that ends waits for the async compaction it started before rolling it back",
    )
    nice: int = option(
        "hoodie.stream.compaction.nice",
        "10",
        integer(0, 19),
        "CPU niceness added to async compaction's merging threads",
    )
    clean_async: bool = option(
        "clean.async.enabled", "true", boolean, aliases=("hoodie.clean.async.enabled", "hoodie.clean.async")
    )
    clean_policy: str = option(
        "clean.policy",
        "KEEP_LATEST_COMMITS",
        one_of(CLEAN_POLICIES, str.upper),
        aliases=clean_keys("policy"),
    )
    retain_commits: int = option(
        "clean.retain_commits",
        "30",
        integer(),
        aliases=clean_keys("commits.retained"),
    )
    retain_file_versions: int = option(
        "clean.retain_file_versions",
        "5",
        integer(),
        aliases=clean_keys("fileversions.retained"),
    )
    retain_hours: int = option(
        "clean.retain_hours",
        "24",
        integer(),
        aliases=clean_keys("hours.retained"),
    )
    parquet_codec: str = option(
        "hoodie.parquet.compression.codec",
        "gzip",
        parquet_codec,
        "compression of the base files (and PARQUET_DATA log blocks) written",
    )
    archive_automatic: bool = option(
        "hoodie.archive.automatic", "true", boolean, "archive the timeline after each clean (compaction/archiver.py)"
    )
    keep_min_commits: int = option(
        "archive.min_commits",
        "40",
        integer(),
        "completed commits an archiving run leaves on the active timeline",
        aliases=("hoodie.keep.min.commits",),
    )
    keep_max_commits: int = option(
        "archive.max_commits",
        "50",
        integer(),
        "archiving runs when more completed commits than this are active",
        aliases=("hoodie.keep.max.commits",),
    )
    archival_batch: int = option("hoodie.commits.archival.batch", "10", integer(), "records per archive log block")
    # on by default here (Hudi: false, for HDFS, whose archive log files are appended to): this project's storage
    # never appends, so without merging every archiving run leaves one more file (compaction/archive_merge.py)
    archive_merge: bool = option(
        "hoodie.archive.merge.enable", "true", boolean, "merge small archive files into one (archive_merge.py)"
    )
    archive_merge_files: int = option(
        "hoodie.archive.merge.files.batch.size", "10", integer(2), "small archive files merged at once"
    )
    archive_merge_small_bytes: int = option(
        "hoodie.archive.merge.small.file.limit.bytes",
        str(20 * 1024 * 1024),
        integer(),
        "archive files up to this size are merged",
    )
    timeline_compaction_batch: int = option(
        "hoodie.timeline.compaction.batch.size",
        "10",
        integer(2),
        "timeline history files of a layer merged into one of the next layer (table versions 8, 9: lsm_history.py)",
    )
    timeline_compaction_max_bytes: int = option(
        "hoodie.timeline.compaction.target.file.max.bytes",
        str(1000 * 1024 * 1024),
        integer(),
        "at most this many bytes of timeline history files are merged at once",
    )
    timeline_manifest_retained: int = option(
        "hoodie.timeline.manifest.retained.versions",
        "3",
        integer(1),
        "timeline history snapshots (manifests, and the files they list) kept",
    )

    def __post_init__(self) -> None:
        if self.keep_max_commits <= self.keep_min_commits:
            raise HoodieConfigError(
                f"option 'archive.max_commits' (hoodie.keep.max.commits: {self.keep_max_commits}) must be greater "
                f"than 'archive.min_commits' (hoodie.keep.min.commits: {self.keep_min_commits})"
            )


@dataclass(frozen=True)
class LockOptions:
    """The writer lease (Hudi's storage-based lock provider keys)."""

    validity_timeout_secs: int = option(
        "hoodie.write.lock.storage.validity.timeout.secs",
        "300",
        integer(),
        "seconds a lease stays valid without renewal; a lease older than this is taken over",
    )
    renew_interval_secs: float = option(
        "hoodie.write.lock.storage.renew.interval.secs", "30", number, "seconds between renewals of a held lease"
    )
    wait_time_ms: int = option(
        "hoodie.write.lock.wait_time_ms", "60000", integer(0), "how long a writer waits for a lease another holds"
    )


@dataclass(frozen=True)
class SinkOptions:
    """The options of a HoodieStreamSink (Hudi's key names; Hudi Flink's for the write chain)."""

    raw: Mapping[str, str] = field(default_factory=dict)  # the options as given (shortcuts as their keys)
    table_name: str = option("hoodie.table.name", None, text, "default: the last segment of the table path")
    table_type: str = option(
        "hoodie.datasource.write.table.type",
        "MERGE_ON_READ",
        one_of(("MERGE_ON_READ",), str.upper),
        aliases=("hoodie.table.type",),
    )
    record_key_fields: list[str] = option("hoodie.datasource.write.recordkey.field", "", names, "required")
    precombine_field: str | None = option("hoodie.datasource.write.precombine.field", None, text)
    partition_fields: list[str] = option("hoodie.datasource.write.partitionpath.field", "", names)
    hive_style: bool = option("hoodie.datasource.write.hive_style_partitioning", "false", boolean)
    url_encode: bool = option("hoodie.datasource.write.partitionpath.urlencode", "false", boolean)
    keygen_class: str | None = option("hoodie.datasource.write.keygenerator.class", None, text)
    keygen_type: str | None = option("hoodie.datasource.write.keygenerator.type", None, text)
    consistent_logical_timestamp: bool = option(
        "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled", "false", boolean
    )
    payload_class: str | None = option("hoodie.datasource.write.payload.class", None, text)
    write_table_version: int | None = option(
        "hoodie.write.table.version",
        None,
        table_version,
        "6, 8 or 9: the version a new table is created at (default 6); a table at a lower version is upgraded to it "
        "(after a compaction of every file group with log files, as Hudi upgrades); unset, a table is written at its "
        "own version",
    )
    partial_update_mode: str = option(
        "hoodie.write.partial.update.mode",
        "NONE",
        one_of(("NONE", "IGNORE_MARKERS"), str.upper),
        "IGNORE_MARKERS: a string or binary column holding the marker keeps the value stored for the key",
    )
    partial_custom_marker: str = option(
        "hoodie.write.partial.custom.marker",
        "__debezium_unavailable_value",
        text,
        "the marker of IGNORE_MARKERS; `hex:<octets>` gives binary columns' marker in hex",
    )
    operation: str = option(
        "hoodie.datasource.write.operation", "upsert", one_of(OPERATIONS, str.lower), aliases=("write.operation",)
    )
    checkpoint_identifier: str = option(
        "hoodie.datasource.write.streaming.checkpoint.identifier", "default_single_writer", text
    )
    cdc_enabled: bool = option(
        "hoodie.table.cdc.enabled",
        "false",
        boolean,
        "a table created with it answers changelog (CDC) queries (set when the table is created)",
        aliases=("cdc.enabled",),
    )
    cdc_logging_mode: str = option(
        "hoodie.table.cdc.supplemental.logging.mode",
        "DATA_BEFORE_AFTER",
        lambda key, value: logging_mode(value, key),
        "OP_KEY_ONLY, DATA_BEFORE or DATA_BEFORE_AFTER (set when the table is created)",
        aliases=("cdc.supplemental.logging.mode",),
    )
    populate_meta_fields: bool = option(
        "hoodie.populate.meta.fields", "true", only(True, "the sink writes meta fields")
    )
    metadata_enabled: bool = option(
        "hoodie.metadata.enable", "false", only(False, "the sink does not write a metadata table (readers list files)")
    )
    parquet_max_file_size: int = option("hoodie.parquet.max.file.size", str(120 * MB), integer())
    log_to_parquet_ratio: float = option("hoodie.logfile.to.parquet.compression.ratio", "0.35", number)
    record_size_estimate: int = option("hoodie.copyonwrite.record.size.estimate", "1024", integer())
    # Hudi Flink options
    global_index: bool = option("index.global.enabled", "true", boolean)
    batch_size_bytes: int = option("write.batch.size", "256", megabytes(number), "MB per bucket buffer")
    task_max_size_bytes: int = option("write.task.max.size", "1024", megabytes(number), "MB per write task")
    write_tasks: int | None = option("write.tasks", None, integer())
    bucket_assign_tasks: int | None = option("write.bucket_assign.tasks", None, integer())
    write_max_file_size: int | None = option(
        "write.parquet.max.file.size",
        None,
        megabytes(integer()),
        "MB; overrides hoodie.parquet.max.file.size when given",
    )
    bulk_insert_sort_input: bool = option(
        "write.bulk_insert.sort_input",
        "true",
        boolean,
        "bulk insert: sort each write task's records by partition and record key before writing",
    )
    # hoodie-stream's own
    key_groups: int = option(
        "hoodie.stream.index.key.groups", "128", integer(1, 32768), "up to Flink's largest max parallelism, 2^15"
    )
    bulk_insert_first_batch: bool = option(
        "hoodie.stream.bulk_insert.first.batch",
        "true",
        boolean,
        "with operation upsert, the first micro-batch into a table without a completed data commit is bulk inserted",
    )
    release_memory: bool = option("hoodie.stream.worker.memory.release", "true", boolean, "see chain/worker_memory.py")
    index_cache_dir: str | None = option(
        "hoodie.stream.index.cache.dir",
        None,
        absolute_path,
        "executors' local copies of the index state of a remote table and spooled uploads (default: "
        "hoodie_stream_index_cache under Spark's local dirs of each executor; storage/local_cache.py)",
    )
    index_cache_max_bytes: int = option(
        "hoodie.stream.index.cache.max.mb",
        "2048",
        megabytes(integer()),
        "MB of local index copies per executor (least recently used evicted)",
    )
    log_batches: bool = option(
        "hoodie.stream.log.batches",
        "true",
        boolean,
        "one INFO line per committed micro-batch on logger hoodie_stream (instant, records, seconds)",
    )
    compaction: CompactionOptions = field(default_factory=CompactionOptions)
    lock: LockOptions = field(default_factory=LockOptions)

    @property
    def parquet_codec(self) -> str:
        """hoodie.parquet.compression.codec (declared with the compaction options, whose base files it compresses)."""
        return self.compaction.parquet_codec

    @property
    def max_file_size(self) -> int:
        """Bytes a file group grows to: write.parquet.max.file.size, else hoodie.parquet.max.file.size."""
        return self.parquet_max_file_size if self.write_max_file_size is None else self.write_max_file_size


def _parsed(cls: type[T], given: Mapping[str, str], **values: Any) -> T:
    """An options dataclass with the fields read from `given` (defaults for the keys it lacks) plus `values`."""
    for name, spec in options_of(cls).items():
        values[name] = spec.read(given)
    return cls(**values)


def _keys(*classes: type) -> list[str]:
    """Every key of the options of `classes`, aliases included."""
    return [key for cls in classes for spec in options_of(cls).values() for key in spec.keys]


def parse_table_service_options(options: Mapping[str, Any] | None = None) -> tuple[CompactionOptions, LockOptions]:
    """(CompactionOptions, LockOptions) from Hudi-named options alone (offline compaction and cleaning); unknown
    keys are refused."""
    raw = {str(k): str(v) for k, v in (options or {}).items()}
    keys = _keys(CompactionOptions, LockOptions)
    unknown = [k for k in raw if k not in keys]
    if unknown:
        raise HoodieConfigError(f"unknown compaction option(s) {sorted(unknown)}; known: {sorted(keys)}")
    return _parsed(CompactionOptions, raw), _parsed(LockOptions, raw)


def parse_compaction_options(options: Mapping[str, Any] | None = None) -> CompactionOptions:
    """CompactionOptions from Hudi-named options alone; unknown keys (lock keys too) are refused."""
    raw = {str(k): str(v) for k, v in (options or {}).items()}
    keys = _keys(CompactionOptions)
    unknown = [k for k in raw if k not in keys]
    if unknown:
        raise HoodieConfigError(f"unknown compaction option(s) {sorted(unknown)}; known: {sorted(keys)}")
    return _parsed(CompactionOptions, raw)


def known_keys() -> set[str]:
    """The keys of every sink option, aliases included (those passed through by prefix aside)."""
    return set(_keys(SinkOptions, CompactionOptions, LockOptions))


def parse_options(path: str, options: Mapping[str, Any] | None = None, **shortcuts: Any) -> SinkOptions:
    """Validate options (Hudi key names) plus keyword shortcuts; unknown or invalid ones raise HoodieConfigError."""
    raw = {str(k): str(v) for k, v in (options or {}).items()}
    for key, value in shortcuts.items():
        if key not in SHORTCUTS:
            raise HoodieConfigError(f"unknown keyword option {key!r}; known: {sorted(SHORTCUTS)}")
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(value)
        raw[SHORTCUTS[key]] = str(value).lower() if isinstance(value, bool) else str(value)
    known = known_keys()
    unknown = [k for k in raw if k not in known and not k.startswith(_PREFIXES_PASSED_THROUGH)]
    if unknown:
        raise HoodieConfigError(f"unknown option(s) {sorted(unknown)} (options use Hudi's key names)")
    opts = _parsed(
        SinkOptions, raw, raw=raw, compaction=_parsed(CompactionOptions, raw), lock=_parsed(LockOptions, raw)
    )
    if not opts.record_key_fields:
        raise HoodieConfigError("option 'hoodie.datasource.write.recordkey.field' (record_key=) is required")
    if not opts.table_name:
        opts = dataclasses.replace(opts, table_name=str(path).rstrip("/").rsplit("/", 1)[-1])
    return opts
