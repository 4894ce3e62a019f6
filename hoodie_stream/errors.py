"""The errors hoodie-stream raises on purpose. Every message names the path, field, record or option at fault."""


class HoodieError(Exception):
    """Base class of every error this package raises on purpose."""


class HoodieTableError(HoodieError):
    """A table on disk cannot be opened or written: missing/corrupt hoodie.properties, wrong version, MDT."""

    def __init__(self, path, reason):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class HoodieTimelineError(HoodieError):
    """An illegal timeline operation (out-of-order instant, overwriting a completed instant, ...)."""


class HoodieFormatError(HoodieError):
    """Bytes on disk do not follow the Hudi v6 format (log block, plan, commit metadata, file name)."""


class HoodieKeyError(HoodieError):
    """A record key or partition path cannot be built (null key, missing field)."""


class HoodieConfigError(HoodieError):
    """An unknown or invalid option."""


class HoodiePathError(HoodieError):
    """A path that would leave its storage root (a table, a cache directory), or a value that cannot be a path
    segment (a partition value that is absolute, holds `..`, an empty segment or a control character)."""


class HoodieStorageError(HoodieError):
    """A storage operation failed: the object is missing, or create-if-absent found it present."""

    def __init__(self, path, reason):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class HoodieObjectExistsError(HoodieStorageError):
    """create-if-absent lost: the object exists already (another writer, or a retried step, created it)."""


class HoodieObjectNotFoundError(HoodieStorageError):
    """The object to read does not exist."""
