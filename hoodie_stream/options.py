"""Sink options: Hudi's (and Hudi Flink's) key names, their defaults, and validation that fails fast."""

import math
from dataclasses import dataclass, field

from .errors import HoodieConfigError

# name -> (default, parser)
_BOOL = "bool"
_INT = "int"
_FLOAT = "float"
_STR = "str"
_LIST = "list"

OPTIONS = {
    "hoodie.table.name": (None, _STR),
    "hoodie.datasource.write.table.type": ("MERGE_ON_READ", _STR),
    "hoodie.datasource.write.recordkey.field": (None, _LIST),
    "hoodie.datasource.write.precombine.field": (None, _STR),
    "hoodie.datasource.write.partitionpath.field": ("", _LIST),
    "hoodie.datasource.write.hive_style_partitioning": ("false", _BOOL),
    "hoodie.datasource.write.partitionpath.urlencode": ("false", _BOOL),
    "hoodie.datasource.write.keygenerator.class": (None, _STR),
    "hoodie.datasource.write.keygenerator.type": (None, _STR),
    "hoodie.datasource.write.keygenerator.consistent.logical.timestamp.enabled": ("false", _BOOL),
    "hoodie.datasource.write.payload.class": (None, _STR),
    "hoodie.datasource.write.operation": ("upsert", _STR),
    "hoodie.datasource.write.streaming.checkpoint.identifier": ("default_single_writer", _STR),
    "hoodie.populate.meta.fields": ("true", _BOOL),
    "hoodie.metadata.enable": ("false", _BOOL),
    "hoodie.parquet.max.file.size": (str(120 * 1024 * 1024), _INT),
    "hoodie.logfile.to.parquet.compression.ratio": ("0.35", _FLOAT),
    "hoodie.copyonwrite.record.size.estimate": ("1024", _INT),
    # Hudi Flink options
    "index.global.enabled": ("true", _BOOL),
    "write.batch.size": ("256", _FLOAT),  # MB per bucket buffer
    "write.task.max.size": ("1024", _FLOAT),  # MB per write task
    "write.tasks": (None, _INT),
    "write.bucket_assign.tasks": (None, _INT),
    "write.parquet.max.file.size": (None, _INT),  # MB; overrides hoodie.parquet.max.file.size when given
    # compaction and cleaning (Hudi Flink option names)
    "compaction.schedule.enabled": ("true", _BOOL),
    "compaction.async.enabled": ("true", _BOOL),
    "compaction.trigger.strategy": ("num_commits", _STR),
    "compaction.delta_commits": ("5", _INT),
    "compaction.delta_seconds": ("3600", _INT),
    "compaction.max_memory": ("100", _INT),  # MB per compaction task
    "compaction.tasks": (None, _INT),
    "clean.async.enabled": ("true", _BOOL),
    "clean.policy": ("KEEP_LATEST_COMMITS", _STR),
    "clean.retain_commits": ("30", _INT),
    "clean.retain_file_versions": ("5", _INT),
    "clean.retain_hours": ("24", _INT),
    # hoodie-stream's own
    "hoodie.stream.index.key.groups": ("128", _INT),
    "hoodie.stream.compaction.max.pending": ("4", _INT),
    "hoodie.stream.compaction.nice": ("10", _INT),  # CPU niceness added to async compaction's merging threads
    "hoodie.stream.worker.memory.release": ("true", _BOOL),  # see streaming_sink/worker_memory.py
}
# integer options whose range is not 1 and up (key groups: up to Flink's largest max parallelism, 2^15)
_INT_RANGES = {"hoodie.stream.compaction.nice": (0, 19), "hoodie.stream.index.key.groups": (1, 32768)}
TRIGGER_STRATEGIES = ("num_commits", "time_elapsed", "num_and_time", "num_or_time")
CLEAN_POLICIES = ("KEEP_LATEST_COMMITS", "KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_BY_HOURS")
_PREFIXES_PASSED_THROUGH = ("hoodie.keygen.timebased.", "hoodie.write.complex.keygen.")
OPERATIONS = ("upsert", "insert", "delete")


def _parse(name, raw, kind):
    if raw is None:
        return None
    text = str(raw).strip()
    try:
        if kind == _BOOL:
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if kind == _INT:
            value = float(text)
            low, high = _INT_RANGES.get(name, (1, math.inf))
            if not value.is_integer() or not low <= value <= high:
                raise ValueError
            return int(value)
        if kind == _FLOAT:
            value = float(text)
            if not math.isfinite(value) or value <= 0:
                raise ValueError
            return value
        if kind == _LIST:
            return [p.strip() for p in text.split(",") if p.strip()]
        return text
    except ValueError:
        expected = {"bool": "true or false", "int": "a positive integer", "float": "a positive number"}[kind]
        if kind == _INT and name in _INT_RANGES:
            expected = "an integer from %d to %d" % _INT_RANGES[name]
        raise HoodieConfigError(f"option {name!r} must be {expected}, got {raw!r}") from None


@dataclass
class CompactionOptions:
    schedule: bool = True
    async_run: bool = True
    trigger: str = "num_commits"
    delta_commits: int = 5
    delta_seconds: int = 3600
    max_memory_bytes: int = 100 * 1024 * 1024
    tasks: int | None = None
    max_pending: int = 4
    nice: int = 10
    clean_async: bool = True
    clean_policy: str = "KEEP_LATEST_COMMITS"
    retain_commits: int = 30
    retain_file_versions: int = 5
    retain_hours: int = 24


def compaction_options(values):
    trigger = values["compaction.trigger.strategy"].lower()
    if trigger not in TRIGGER_STRATEGIES:
        raise HoodieConfigError(f"option 'compaction.trigger.strategy' must be one of {TRIGGER_STRATEGIES}, "
                                f"got {trigger!r}")
    policy = values["clean.policy"].upper()
    if policy not in CLEAN_POLICIES:
        raise HoodieConfigError(f"option 'clean.policy' must be one of {CLEAN_POLICIES}, got {policy!r}")
    return CompactionOptions(
        schedule=values["compaction.schedule.enabled"], async_run=values["compaction.async.enabled"],
        trigger=trigger, delta_commits=values["compaction.delta_commits"],
        delta_seconds=values["compaction.delta_seconds"],
        max_memory_bytes=values["compaction.max_memory"] * 1024 * 1024, tasks=values["compaction.tasks"],
        max_pending=values["hoodie.stream.compaction.max.pending"],
        nice=values["hoodie.stream.compaction.nice"], clean_async=values["clean.async.enabled"],
        clean_policy=policy, retain_commits=values["clean.retain_commits"],
        retain_file_versions=values["clean.retain_file_versions"], retain_hours=values["clean.retain_hours"])


def parse_compaction_options(options=None):
    """CompactionOptions from Hudi-named options alone (offline compaction); unknown keys are refused."""
    raw = {str(k): str(v) for k, v in (options or {}).items()}
    keys = [k for k in OPTIONS if k.startswith(("compaction.", "clean.", "hoodie.stream.compaction."))]
    unknown = [k for k in raw if k not in keys]
    if unknown:
        raise HoodieConfigError(f"unknown compaction option(s) {sorted(unknown)}; known: {sorted(keys)}")
    return compaction_options({k: _parse(k, raw.get(k, OPTIONS[k][0]), OPTIONS[k][1]) for k in keys})


@dataclass
class SinkOptions:
    raw: dict = field(default_factory=dict)
    table_name: str = ""
    record_key_fields: list = field(default_factory=list)
    precombine_field: str | None = None
    partition_fields: list = field(default_factory=list)
    hive_style: bool = False
    url_encode: bool = False
    operation: str = "upsert"
    checkpoint_identifier: str = "default_single_writer"
    global_index: bool = True
    batch_size_bytes: int = 0
    task_max_size_bytes: int = 0
    write_tasks: int | None = None
    bucket_assign_tasks: int | None = None
    max_file_size: int = 0
    log_to_parquet_ratio: float = 0.35
    record_size_estimate: int = 1024
    key_groups: int = 128
    payload_class: str | None = None
    release_memory: bool = True
    compaction: "CompactionOptions | None" = None

    def table_props(self):
        """hoodie.properties-style props for the key generator of new tables."""
        props = {
            "hoodie.table.recordkey.fields": ",".join(self.record_key_fields),
            "hoodie.table.partition.fields": ",".join(self.partition_fields),
            "hoodie.datasource.write.hive_style_partitioning": str(self.hive_style).lower(),
            "hoodie.datasource.write.partitionpath.urlencode": str(self.url_encode).lower(),
        }
        for key, value in self.raw.items():
            if key.startswith(_PREFIXES_PASSED_THROUGH) or key.startswith("hoodie.datasource.write.keygenerator"):
                props[key] = value
        return props


def parse_options(path, options=None, **shortcuts):
    """Validate options (Hudi key names) plus keyword shortcuts; unknown or invalid ones raise HoodieConfigError."""
    raw = {str(k): str(v) for k, v in (options or {}).items()}
    aliases = {
        "record_key": "hoodie.datasource.write.recordkey.field",
        "precombine_field": "hoodie.datasource.write.precombine.field",
        "partition_fields": "hoodie.datasource.write.partitionpath.field",
        "table_name": "hoodie.table.name",
        "operation": "hoodie.datasource.write.operation",
        "hive_style": "hoodie.datasource.write.hive_style_partitioning",
    }
    for key, value in shortcuts.items():
        if key not in aliases:
            raise HoodieConfigError(f"unknown keyword option {key!r}; known: {sorted(aliases)}")
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(value)
        raw[aliases[key]] = str(value).lower() if isinstance(value, bool) else str(value)
    unknown = [k for k in raw if k not in OPTIONS and not k.startswith(_PREFIXES_PASSED_THROUGH)]
    if unknown:
        raise HoodieConfigError(f"unknown option(s) {sorted(unknown)} (options use Hudi's key names)")
    values = {name: _parse(name, raw.get(name, default), kind) for name, (default, kind) in OPTIONS.items()}
    table_type = values["hoodie.datasource.write.table.type"].upper()
    if table_type != "MERGE_ON_READ":
        raise HoodieConfigError(f"option 'hoodie.datasource.write.table.type' must be MERGE_ON_READ, got {table_type!r}")
    if not values["hoodie.datasource.write.recordkey.field"]:
        raise HoodieConfigError("option 'hoodie.datasource.write.recordkey.field' (record_key=) is required")
    operation = values["hoodie.datasource.write.operation"].lower()
    if operation not in OPERATIONS:
        raise HoodieConfigError(f"option 'hoodie.datasource.write.operation' must be one of {OPERATIONS}, "
                                f"got {operation!r}")
    if not values["hoodie.populate.meta.fields"]:
        raise HoodieConfigError("option 'hoodie.populate.meta.fields' must be true: the sink writes meta fields")
    if values["hoodie.metadata.enable"]:
        raise HoodieConfigError("option 'hoodie.metadata.enable' must be false: the sink does not write a "
                                "metadata table (readers list files)")
    max_file = values["hoodie.parquet.max.file.size"]
    if values["write.parquet.max.file.size"] is not None:
        max_file = values["write.parquet.max.file.size"] * 1024 * 1024
    name = values["hoodie.table.name"] or str(path).rstrip("/").rsplit("/", 1)[-1]
    return SinkOptions(
        raw=raw,
        table_name=name,
        record_key_fields=values["hoodie.datasource.write.recordkey.field"],
        precombine_field=values["hoodie.datasource.write.precombine.field"],
        partition_fields=values["hoodie.datasource.write.partitionpath.field"],
        hive_style=values["hoodie.datasource.write.hive_style_partitioning"],
        url_encode=values["hoodie.datasource.write.partitionpath.urlencode"],
        operation=operation,
        checkpoint_identifier=values["hoodie.datasource.write.streaming.checkpoint.identifier"],
        global_index=values["index.global.enabled"],
        batch_size_bytes=int(values["write.batch.size"] * 1024 * 1024),
        task_max_size_bytes=int(values["write.task.max.size"] * 1024 * 1024),
        write_tasks=values["write.tasks"],
        bucket_assign_tasks=values["write.bucket_assign.tasks"],
        max_file_size=max_file,
        log_to_parquet_ratio=values["hoodie.logfile.to.parquet.compression.ratio"],
        record_size_estimate=values["hoodie.copyonwrite.record.size.estimate"],
        key_groups=values["hoodie.stream.index.key.groups"],
        payload_class=values["hoodie.datasource.write.payload.class"],
        release_memory=values["hoodie.stream.worker.memory.release"],
        compaction=compaction_options(values),
    )
