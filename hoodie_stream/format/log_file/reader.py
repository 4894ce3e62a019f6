"""Read a log file into blocks the way Hudi's HoodieLogFileReader does.

A block is corrupt when its blockSize cannot be read, runs past the end of the file, disagrees with the
trailing length (which counts the magic too), or is not followed by another magic or end of file (fewer than
6 bytes left). A corrupt block is reported as a CORRUPT block holding the bytes from after its magic up to the
next `#HUDI#` magic (or EOF), where reading resumes.
"""

import struct

from ...errors import HoodieFormatError
from ...storage import storage_for
from .log_block import MAGIC, MIN_BLOCK_SIZE, BlockType, LogBlock, decode_block_at


def _int32(value):
    """Java's (int) cast of a long."""
    return (value + 2**31) % 2**32 - 2**31


def is_block_corrupt(data, pos):
    """True when the block whose magic starts at `pos` fails Hudi's corruption checks."""
    n = len(data)
    start = pos + len(MAGIC)
    if start + 8 > n:
        return True
    block_size = _int32(struct.unpack_from(">q", data, start)[0])
    after_size = start + 8
    end = after_size + block_size
    if block_size < MIN_BLOCK_SIZE or end > n:
        return True
    if struct.unpack_from(">q", data, end - 8)[0] - len(MAGIC) != block_size:
        return True
    return n - end >= len(MAGIC) and data[end : end + len(MAGIC)] != MAGIC


def read_log_blocks(data, path=""):
    """All blocks of the log file bytes `data`, CORRUPT blocks included."""
    data = bytes(data)
    n = len(data)
    blocks = []
    pos = 0
    while n - pos >= len(MAGIC):
        if data[pos : pos + len(MAGIC)] != MAGIC:
            raise HoodieFormatError(f"{path}: no log block magic at offset {pos}")
        if is_block_corrupt(data, pos):
            nxt = data.find(MAGIC, pos + len(MAGIC))
            nxt = n if nxt < 0 else nxt
            blocks.append(LogBlock(BlockType.CORRUPT, {}, data[pos + len(MAGIC) : nxt], {}, pos, nxt - pos))
            pos = nxt
            continue
        try:
            block, pos = decode_block_at(data, pos)
        except HoodieFormatError as e:
            raise HoodieFormatError(f"{path}: {e}") from None
        blocks.append(block)
    return blocks


def read_log_file(storage, path):
    """All blocks of the log file at `path` (relative to the storage root; see the module docstring for corrupt
    blocks)."""
    storage = storage_for(storage)
    return read_log_blocks(storage.read(path), storage.uri_of(path))
