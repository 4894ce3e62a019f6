"""Errors raised by the format core. Every message names the path, field, record or option at fault."""


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
