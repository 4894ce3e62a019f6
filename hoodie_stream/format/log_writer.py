"""Write log files: every write is a new log file version, created atomically and never overwritten."""

import io
import os
import uuid

from ..errors import HoodieFormatError
from .log_block import write_block


def encode_log_file(blocks):
    out = io.BytesIO()
    for block in blocks:
        write_block(out, block)
    return out.getvalue()


def write_log_file(path, blocks):
    """Write `blocks` as a new log file via a temporary name + rename; returns the file size.

    Refuses to overwrite an existing file (every write makes a new log version).
    """
    path = str(path)
    if os.path.exists(path):
        raise HoodieFormatError(f"{path}: log file already exists; write a new log version instead")
    directory, name = os.path.split(path)
    # The temporary name starts with '_' so that no reader takes it for a log or base file.
    tmp = os.path.join(directory, f"_tmp_{uuid.uuid4().hex}_{name.lstrip('.')}.writing")
    try:
        size = 0
        with open(tmp, "wb") as f:
            for block in blocks:  # a large block is never joined into one buffer
                size += write_block(f, block)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise HoodieFormatError(f"{path}: log file already exists; write a new log version instead") from None
        except OSError:
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return size
