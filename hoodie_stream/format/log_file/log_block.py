"""Hudi log blocks (log format version 1): the framing every block shares, and COMMAND blocks.

Block layout (all integers big endian): magic `#HUDI#`, int64 blockSize (bytes after this field, including
the trailing length), int32 format version 1, int32 block type, header map, int64 content length, content,
footer map, int64 total length of the block before this field (= blockSize + 6).
A map is int32 count, then per entry int32 key ordinal, int32 byte length, UTF-8 bytes.
The contents of data and delete blocks are in `data_block.py` and `delete_block.py`.
"""

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from ...errors import HoodieFormatError

MAGIC = b"#HUDI#"
LOG_FORMAT_VERSION = 1
CONTENT_VERSION = 3  # of data and delete block contents
ROLLBACK_COMMAND = "0"
# version + type + empty header + content length + empty footer + trailing length
MIN_BLOCK_SIZE = 4 + 4 + 4 + 8 + 4 + 8


class BlockType(IntEnum):
    COMMAND = 0
    DELETE = 1
    CORRUPT = 2
    AVRO_DATA = 3
    HFILE_DATA = 4
    PARQUET_DATA = 5
    CDC_DATA = 6


class HeaderKey(IntEnum):
    INSTANT_TIME = 0
    TARGET_INSTANT_TIME = 1
    SCHEMA = 2
    COMMAND_BLOCK_TYPE = 3
    COMPACTED_BLOCK_TIMES = 4
    RECORD_POSITIONS = 5
    BLOCK_IDENTIFIER = 6
    IS_PARTIAL = 7  # table version 8 and later: "true" on a block of partial updates (its SCHEMA a subset)
    BASE_FILE_INSTANT_TIME_OF_RECORD_POSITIONS = 8  # version 8 and later: the base file RECORD_POSITIONS refer to


@dataclass
class LogBlock:
    """One block. For CORRUPT blocks `content` holds the raw bytes after the magic up to the next magic/EOF.

    `offset` is the position of the block's magic in its file and `size` its length in bytes (set by readers).
    """

    block_type: BlockType
    header: dict
    content: bytes | memoryview  # read from a file: a view of its bytes
    footer: dict = field(default_factory=dict)
    offset: int = -1
    size: int = 0

    @property
    def instant_time(self):
        return self.header.get(HeaderKey.INSTANT_TIME)


def _encode_map(entries):
    parts = [struct.pack(">i", len(entries))]
    for key, value in entries.items():
        data = str(value).encode("utf-8")
        parts.append(struct.pack(">ii", int(key), len(data)))
        parts.append(data)
    return b"".join(parts)


def _decode_map(buf, pos, end):
    if pos + 4 > end:
        raise HoodieFormatError(f"metadata map at offset {pos} runs past the block end {end}")
    (count,) = struct.unpack_from(">i", buf, pos)
    pos += 4
    if count < 0:
        raise HoodieFormatError(f"negative metadata entry count {count} at offset {pos - 4}")
    entries = {}
    for _ in range(count):
        if pos + 8 > end:
            raise HoodieFormatError(f"metadata entry at offset {pos} runs past the block end {end}")
        key, length = struct.unpack_from(">ii", buf, pos)
        pos += 8
        if length < 0 or pos + length > end:
            raise HoodieFormatError(f"metadata value of length {length} at offset {pos} runs past the block end")
        try:
            entries[HeaderKey(key)] = bytes(buf[pos : pos + length]).decode("utf-8")
        except ValueError as e:
            raise HoodieFormatError(f"unknown header key ordinal {key} at offset {pos - 8}: {e}") from None
        pos += length
    return entries, pos


def _frame(block, content_len):
    """(bytes before the content, bytes after it) of a block whose content is `content_len` bytes long. The first
    part has the same length whatever `content_len` is."""
    head = struct.pack(">ii", LOG_FORMAT_VERSION, int(block.block_type)) + _encode_map(block.header)
    footer = _encode_map(block.footer or {})
    block_size = len(head) + 8 + content_len + len(footer) + 8
    return (
        MAGIC + struct.pack(">q", block_size) + head + struct.pack(">q", content_len),
        footer + struct.pack(">q", block_size + len(MAGIC)),
    )


def block_segments(block):
    """The bytes of a block, magic included, as a list of segments to write one after the other (no copy of the
    content). `block.content` may be bytes or a list of byte segments. A CORRUPT block gives back its magic and
    raw bytes unchanged."""
    parts = list(block.content) if isinstance(block.content, (list, tuple)) else [block.content]
    if block.block_type == BlockType.CORRUPT:
        return [MAGIC, *parts]
    before, after = _frame(block, sum(len(p) for p in parts))
    return [before, *parts, after]


def write_block(f, block):
    """Write one block at the current position of the binary file `f`; returns the bytes written.

    `block.content` may be bytes, a list of byte segments, or an iterator of segments whose total length is not
    known up front (a data block encoded while it is written): then `f` must be seekable, and the framing before
    the content is written again once the content's length is known.
    """
    if block.block_type == BlockType.CORRUPT or isinstance(block.content, (bytes, bytearray, memoryview, list, tuple)):
        written = 0
        for segment in block_segments(block):
            f.write(segment)
            written += len(segment)
        return written
    start = f.tell()
    f.write(_frame(block, 0)[0])
    content_len = 0
    for part in block.content:
        f.write(part)
        content_len += len(part)
    before, after = _frame(block, content_len)
    f.write(after)
    end = f.tell()
    f.seek(start)
    f.write(before)
    f.seek(end)
    return end - start


def encode_block(block):
    """Full bytes of a block, magic included. A CORRUPT block gives back its magic and raw bytes unchanged."""
    return b"".join(bytes(p) for p in block_segments(block))


def decode_block_at(buf, pos):
    """Decode the well-formed block whose magic starts at `pos`; returns (LogBlock, position after it)."""
    buf = memoryview(buf)
    n = len(buf)
    if bytes(buf[pos : pos + 6]) != MAGIC:
        raise HoodieFormatError(f"no log block magic at offset {pos}")
    if pos + 14 + MIN_BLOCK_SIZE > n:
        raise HoodieFormatError(f"log block at offset {pos} is truncated")
    # Java reads blockSize as a long and casts it to int
    block_size = (struct.unpack_from(">q", buf, pos + 6)[0] + 2**31) % 2**32 - 2**31
    start = pos + 14
    end = start + block_size
    if block_size < MIN_BLOCK_SIZE or end > n:
        raise HoodieFormatError(f"log block at offset {pos}: block size {block_size} does not fit the file ({n} bytes)")
    version, type_id = struct.unpack_from(">ii", buf, start)
    if version != LOG_FORMAT_VERSION:
        raise HoodieFormatError(f"log block at offset {pos}: log format version {version} is not supported (only 1)")
    try:
        block_type = BlockType(type_id)
    except ValueError:
        raise HoodieFormatError(f"log block at offset {pos}: unknown block type {type_id}") from None
    header, p = _decode_map(buf, start + 8, end - 8)
    if p + 8 > end - 8:
        raise HoodieFormatError(f"log block at offset {pos}: content length runs past the block end")
    (content_length,) = struct.unpack_from(">q", buf, p)
    p += 8
    if content_length < 0 or p + content_length > end - 8:
        raise HoodieFormatError(f"log block at offset {pos}: content length {content_length} runs past the block end")
    content = buf[p : p + content_length]  # a view: the file's bytes are not copied (a block can be 100s of MB)
    footer, p = _decode_map(buf, p + content_length, end - 8)
    (total,) = struct.unpack_from(">q", buf, end - 8)
    if p != end - 8 or total != block_size + len(MAGIC):
        raise HoodieFormatError(
            f"log block at offset {pos}: inconsistent framing (fields end at {p}, trailer at {end - 8}, "
            f"trailing length {total}, block size {block_size})"
        )
    return LogBlock(block_type, header, content, footer, pos, end - pos), end


def rollback_command_block(instant, target_instant):
    """A COMMAND block rolling back `target_instant`, written at rollback instant `instant`."""
    header = {
        HeaderKey.INSTANT_TIME: instant,
        HeaderKey.COMMAND_BLOCK_TYPE: ROLLBACK_COMMAND,
        HeaderKey.TARGET_INSTANT_TIME: target_instant,
    }
    return LogBlock(BlockType.COMMAND, header, b"", {})
