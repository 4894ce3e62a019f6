"""Write log files: every write is a new log file version, created atomically and never overwritten."""

import io

from ...errors import HoodieFormatError, HoodieObjectExistsError
from ...storage import storage_for
from .log_block import write_block


def encode_log_file(blocks):
    out = io.BytesIO()
    for block in blocks:
        write_block(out, block)
    return out.getvalue()


def write_log_file(storage, path, blocks):
    """Write `blocks` as a new log file at `path` (relative to the storage root), created if absent and never
    overwritten (every write makes a new log version); returns the file size. A large block is never joined into one
    buffer: it is written as it is encoded."""
    storage = storage_for(storage)
    try:
        with storage.open_output(path, create=True) as f:
            return sum(write_block(f, block) for block in blocks)
    except HoodieObjectExistsError:
        raise HoodieFormatError(
            f"{storage.uri_of(path)}: log file already exists; write a new log version instead"
        ) from None
