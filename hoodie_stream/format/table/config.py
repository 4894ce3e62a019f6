"""hoodie.properties: create, load (with Java's backup fallback), validate, and change by Hudi's backup protocol."""

import logging
import zlib

from ...errors import (
    HoodieFormatError,
    HoodieObjectExistsError,
    HoodieObjectNotFoundError,
    HoodieStorageError,
    HoodieTableError,
)
from ...storage import storage_for
from ..record.merge import ordering_field
from ..util import java_properties
from .versions import (
    EVENT_TIME_STRATEGY,
    HISTORY_PATH,
    TABLE_VERSION,
    TIMELINE_PATH,
    WRITE_VERSIONS,
    version_properties,
)

log = logging.getLogger("hoodie_stream")

HOODIE_DIR = ".hoodie"
PROPERTIES_FILE = "hoodie.properties"
BACKUP_FILE = "hoodie.properties.backup"
PROPERTIES_PATH = f"{HOODIE_DIR}/{PROPERTIES_FILE}"
BACKUP_PATH = f"{HOODIE_DIR}/{BACKUP_FILE}"
# the table versions read, with the timeline layout each has: 6 (Hudi 0.14/0.15), 8 (Hudi 1.0), 9 (Hudi 1.1, 1.2)
READ_VERSIONS = {"6": "1", "8": "2", "9": "2"}
MERGER_STRATEGY_ID = EVENT_TIME_STRATEGY
REQUIRED_KEYS = (
    "hoodie.table.name",
    "hoodie.table.type",
    "hoodie.table.version",
    "hoodie.timeline.layout.version",
    "hoodie.table.checksum",
)
EMPTY_DIRS = (".aux/.bootstrap/.partitions", ".aux/.bootstrap/.fileids", ".schema", "archived", ".temp")
# the metadata table: its directory, the table config keys naming its partitions (ready for readers / being built)
# and the write config some writers also store in hoodie.properties
METADATA_TABLE_DIR = f"{HOODIE_DIR}/metadata"
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"
METADATA_PARTITIONS_INFLIGHT = "hoodie.table.metadata.partitions.inflight"
METADATA_ENABLE = "hoodie.metadata.enable"


def checksum(props):
    """Hudi's table checksum: CRC32 of '<database>.<table name>'."""
    name = f"{props.get('hoodie.database.name', '')}.{props['hoodie.table.name']}"
    return zlib.crc32(name.encode("utf-8"))


def _read(storage, path):
    """Parse and checksum-validate one properties file; returns (props, None) or (None, reason)."""
    try:
        data = storage.read(path)
    except HoodieObjectNotFoundError:
        return None, "file is missing"
    except (HoodieStorageError, OSError) as e:
        return None, f"cannot be read: {e}"
    return _parse(data)


def timeline_props(storage):
    """(timeline layout version, timeline directory relative to the root) from hoodie.properties (or its backup),
    without validating the rest: layout 1 has its instants in `.hoodie/`, layout 2 (table version 8 and later) in
    `.hoodie/<hoodie.timeline.path>` (`timeline`). A table without readable properties is read as layout 1 (its
    timeline reader reports what is missing)."""
    for path in (PROPERTIES_PATH, BACKUP_PATH):
        props, _reason = _read(storage, path)
        if props is not None:
            return timeline_layout(props)
    return 1, HOODIE_DIR


def timeline_layout(props):
    """(timeline layout version, timeline directory relative to the root) of hoodie.properties-style props."""
    layout = int((props.get("hoodie.timeline.layout.version") or "1").strip() or 1)
    if layout >= 2:
        return layout, f"{HOODIE_DIR}/{(props.get('hoodie.timeline.path') or 'timeline').strip('/')}"
    return layout, HOODIE_DIR


def _parse(data):
    """(props, None) for the bytes of a valid properties file, else (None, reason)."""
    try:
        props = java_properties.loads(data.decode("latin-1"))
    except (HoodieFormatError, ValueError) as e:
        return None, f"corrupt, cannot be parsed: {e}"
    if "hoodie.table.name" not in props:
        return None, "corrupt or incomplete: missing required key hoodie.table.name"
    if "hoodie.table.checksum" not in props:
        return None, "corrupt or incomplete: missing required key hoodie.table.checksum"
    try:
        stored = int(props["hoodie.table.checksum"])
    except ValueError:
        return None, f"corrupt: hoodie.table.checksum {props['hoodie.table.checksum']!r} is not a number"
    if stored != checksum(props):
        return None, f"checksum mismatch: hoodie.table.checksum={stored}, expected {checksum(props)}"
    return props, None


def _bool(value, default=False):
    return default if value is None else str(value).strip().lower() == "true"


def _list(value):
    return [v.strip() for v in value.split(",") if v.strip()] if value else []


class TableConfig:
    """The properties of one table (`props` is a plain dict of strings)."""

    def __init__(self, storage, props):
        self.storage = storage_for(storage)
        self.props = props

    @property
    def path(self):
        """The URI of hoodie.properties, for messages."""
        return self.storage.uri_of(PROPERTIES_PATH)

    @classmethod
    def load(cls, storage):
        """Load and validate `.hoodie/hoodie.properties` of the table (falls back to hoodie.properties.backup)."""
        storage = storage_for(storage)
        main = storage.uri_of(PROPERTIES_PATH)
        props, reason = _read(storage, PROPERTIES_PATH)
        if props is None:
            backup_props, backup_reason = _read(storage, BACKUP_PATH)
            if backup_props is None and backup_reason == reason == "file is missing":
                # a change (`delete_properties`) completed between the two reads: the new file is there now
                backup_props, backup_reason = _read(storage, PROPERTIES_PATH)
            if backup_props is None:
                if backup_reason == reason == "file is missing" and not storage.exists(""):
                    raise HoodieTableError(storage.uri, "the table path does not exist")
                if backup_reason != "file is missing":
                    reason = f"{reason}; {BACKUP_FILE}: {backup_reason}"
                raise HoodieTableError(main, f"hoodie.properties {reason}")
            props = backup_props
        missing = [k for k in REQUIRED_KEYS if not props.get(k)]
        if missing:
            raise HoodieTableError(main, f"missing required key(s) {', '.join(missing)}")
        version = props["hoodie.table.version"].strip()
        if version not in READ_VERSIONS:
            raise HoodieTableError(
                main, f"table version {version} is not supported (versions {', '.join(READ_VERSIONS)} are read)"
            )
        layout = props["hoodie.timeline.layout.version"].strip()
        if layout != READ_VERSIONS[version]:
            raise HoodieTableError(
                main,
                f"timeline layout version {layout} does not go with table version {version} (it has layout "
                f"{READ_VERSIONS[version]})",
            )
        return cls(storage, props)

    @property
    def version(self) -> int:
        return int(self.props["hoodie.table.version"])

    @classmethod
    def create(
        cls,
        storage,
        *,
        table_name,
        record_key_fields,
        precombine_field,
        partition_fields,
        keygen_class,
        hive_style,
        url_encode,
        payload_class,
        schema_avro,
        table_type="MERGE_ON_READ",
        database_name="default",
        extra=None,
        version=TABLE_VERSION,
        payload_given=True,
    ):
        """Initialise .hoodie/ (hoodie.properties, created if absent, and Hudi's empty directories where the storage
        has directories); refuses an existing table. `version`: the table version, 6 (default), 8 or 9. `payload_given`:
        whether the payload class was asked for (at 9 a default one is not recorded, as Hudi 1.x creates its tables:
        the merge mode says it all)."""
        storage = storage_for(storage)
        path = storage.uri_of(PROPERTIES_PATH)
        if storage.exists(PROPERTIES_PATH) or storage.exists(BACKUP_PATH):
            raise HoodieTableError(path, "a table already exists here; refusing to overwrite hoodie.properties")
        if not table_name:
            raise HoodieTableError(path, "table_name is required")
        if not record_key_fields:
            raise HoodieTableError(path, "record_key_fields is required")
        props = {
            "hoodie.table.name": table_name,
            "hoodie.table.type": table_type,
            "hoodie.table.version": TABLE_VERSION,
            "hoodie.timeline.layout.version": "1",
            "hoodie.archivelog.folder": "archived",
            "hoodie.database.name": database_name or "",
            "hoodie.table.recordkey.fields": ",".join(record_key_fields),
        }
        if precombine_field:
            props["hoodie.table.precombine.field"] = precombine_field
        if partition_fields:
            props["hoodie.table.partition.fields"] = ",".join(partition_fields)
        props.update(
            {
                "hoodie.table.keygenerator.class": keygen_class,
                "hoodie.datasource.write.hive_style_partitioning": "true" if hive_style else "false",
                "hoodie.datasource.write.partitionpath.urlencode": "true" if url_encode else "false",
                "hoodie.datasource.write.drop.partition.columns": "false",
                "hoodie.table.base.file.format": "PARQUET",
                "hoodie.table.timeline.timezone": "UTC",
                "hoodie.compaction.payload.class": payload_class,
                "hoodie.compaction.record.merger.strategy": MERGER_STRATEGY_ID,
                "hoodie.table.create.schema": schema_avro,
            }
        )
        if not database_name:
            del props["hoodie.database.name"]
        props.update({k: str(v) for k, v in (extra or {}).items()})
        dirs = EMPTY_DIRS
        if int(version) != int(TABLE_VERSION):
            if int(version) not in WRITE_VERSIONS:
                raise HoodieTableError(path, f"table version {version} is not written (versions {WRITE_VERSIONS})")
            # as Hudi 1.x creates them: its merge keys instead of version 6's strategy key, layout 2's directories
            updates, deletes = version_properties(props, int(version), initial=version)
            for key in [*deletes, "hoodie.compaction.record.merger.strategy"]:
                props.pop(key, None)
            props.update(updates)
            if not payload_given:
                props.pop("hoodie.table.legacy.payload.class", None)
            dirs = (*EMPTY_DIRS, TIMELINE_PATH, f"{TIMELINE_PATH}/{HISTORY_PATH}")
        props["hoodie.table.checksum"] = str(checksum(props))
        for d in dirs:
            storage.make_dirs(f"{HOODIE_DIR}/{d}")
        try:
            storage.create(PROPERTIES_PATH, properties_bytes(props))
        except HoodieObjectExistsError:
            raise HoodieTableError(
                path, "a table already exists here; refusing to overwrite hoodie.properties"
            ) from None
        return cls(storage, props)

    def check_writable(self):
        """Refuse tables with a metadata table (a stale one would mislead Java readers): the writers that hold the
        table's lease (the sink, offline compaction and cleaning) remove it first (`metadata_table.py`)."""
        remedy = "writing needs it removed first, as HoodieStreamSink and offline compaction and cleaning do"
        if self.storage.exists(METADATA_TABLE_DIR):
            raise HoodieTableError(self.path, f"table has a metadata table ({METADATA_TABLE_DIR}); {remedy}")
        if self.props.get(METADATA_PARTITIONS, "").strip():
            raise HoodieTableError(self.path, f"{METADATA_PARTITIONS} is set; {remedy}")
        if _bool(self.props.get(METADATA_ENABLE)):
            raise HoodieTableError(self.path, f"{METADATA_ENABLE}=true; {remedy}")

    @property
    def metadata_table_keys(self):
        """The keys of hoodie.properties that declare a metadata table: its partitions, ready or being built
        (non-empty values), and hoodie.metadata.enable=true."""
        keys = [k for k in (METADATA_PARTITIONS, METADATA_PARTITIONS_INFLIGHT) if self.props.get(k, "").strip()]
        if _bool(self.props.get(METADATA_ENABLE)):
            keys.append(METADATA_ENABLE)
        return keys

    @property
    def table_name(self):
        return self.props["hoodie.table.name"]

    @property
    def table_type(self):
        return self.props.get("hoodie.table.type", "COPY_ON_WRITE")

    @property
    def database_name(self):
        return self.props.get("hoodie.database.name")

    @property
    def record_key_fields(self):
        return _list(self.props.get("hoodie.table.recordkey.fields"))

    @property
    def precombine_field(self):
        return ordering_field(self.props)

    @property
    def partition_fields(self):
        return _list(self.props.get("hoodie.table.partition.fields"))

    @property
    def keygen_class(self):
        return self.props.get("hoodie.table.keygenerator.class")

    @property
    def hive_style(self):
        return _bool(self.props.get("hoodie.datasource.write.hive_style_partitioning"))

    @property
    def url_encode(self):
        return _bool(self.props.get("hoodie.datasource.write.partitionpath.urlencode"))

    @property
    def payload_class(self):
        return self.props.get("hoodie.compaction.payload.class")

    @property
    def populate_meta_fields(self):
        return _bool(self.props.get("hoodie.populate.meta.fields"), True)

    @property
    def create_schema(self):
        return self.props.get("hoodie.table.create.schema")

    @property
    def timeline_timezone(self):
        return self.props.get("hoodie.table.timeline.timezone", "LOCAL")

    @property
    def base_file_format(self):
        return self.props.get("hoodie.table.base.file.format", "PARQUET")


def _valid_bytes(storage, path):
    """The bytes of the properties file at `path` when it is there and valid, else None (storage errors raise)."""
    try:
        data = storage.read(path)
    except HoodieObjectNotFoundError:
        return None
    return data if _parse(data)[0] is not None else None


def recover_properties(storage):
    """Finish a change of hoodie.properties that was interrupted, as Hudi does before changing it
    (HoodieTableConfig.recoverIfNeeded): a hoodie.properties that is missing (or invalid) is created again from a
    valid hoodie.properties.backup (the table as it was before the change), then the backup is deleted. Returns
    True when there was something to finish."""
    storage = storage_for(storage)
    restored = False
    if _valid_bytes(storage, PROPERTIES_PATH) is None:
        backup = _valid_bytes(storage, BACKUP_PATH)
        if backup is None:
            return False  # nothing to recover from: loading the table says why
        storage.delete(PROPERTIES_PATH)  # an invalid one (readers read the backup meanwhile)
        try:
            storage.create(PROPERTIES_PATH, backup)
            restored = True
        except HoodieObjectExistsError:
            pass  # a change completed meanwhile
    if storage.delete(BACKUP_PATH) or restored:
        log.info("%s: finished an interrupted change of hoodie.properties", storage.uri_of(PROPERTIES_PATH))
        return True
    return False


def delete_properties(storage, keys):
    """hoodie.properties without `keys` (`modify_properties`). Returns the new properties."""
    return modify_properties(storage, deletes=keys)


def modify_properties(storage, updates=None, deletes=()):
    """Rewrite hoodie.properties with `updates` set and `deletes` removed by Hudi's protocol for changing table properties
    (HoodieTableConfig.delete / modify), on a storage without rename: an interrupted change is finished first; the
    current file is copied to hoodie.properties.backup (created if absent); hoodie.properties is deleted (readers
    read the backup meanwhile) and created again (create-if-absent: a writer that lost a race fails, it never
    overwrites) with the change, its checksum recomputed; it is read back and checked; then the backup is deleted.
    A crash at any step leaves a readable hoodie.properties or backup, and the next change finishes it. Returns
    the new properties."""
    storage = storage_for(storage)
    path = storage.uri_of(PROPERTIES_PATH)
    recover_properties(storage)
    data = storage.read(PROPERTIES_PATH)
    props, reason = _parse(data)
    if props is None:
        raise HoodieTableError(path, f"hoodie.properties {reason}")
    dropped = set(deletes)
    new = {k: v for k, v in props.items() if k not in dropped}
    new.update(updates or {})
    new["hoodie.table.checksum"] = str(checksum(new))
    storage.create(BACKUP_PATH, data)
    storage.delete(PROPERTIES_PATH)
    storage.create(PROPERTIES_PATH, properties_bytes(new, "Updated at " + java_properties.java_instant_string()))
    written, reason = _read(storage, PROPERTIES_PATH)
    if written != new:
        storage.delete(PROPERTIES_PATH)  # readers keep reading the backup; the next change starts from it
        raise HoodieTableError(path, f"hoodie.properties did not read back as written ({reason or 'other values'})")
    storage.delete(BACKUP_PATH)
    return new


def properties_bytes(props, comments=None):
    """The bytes of a properties file, Properties.store style."""
    text = java_properties.dumps(props, java_properties.store_comment() if comments is None else comments)
    return text.encode("latin-1")
