"""Whether the content of one log block decodes, for `validate`.

AVRO_DATA content is walked by its record length prefixes (`data_block.avro_record_bounds`), then every record is
decoded with fastavro against the block's writer schema and must use exactly its bytes: a stricter check than the
read path's vectorized decoder makes (it refuses lengths outside the content, not a record that ends before or after
its prefix says). PARQUET_DATA and DELETE content go through the read path's decoders (`log_scanner.block_versions`).
"""

from __future__ import annotations

import io
import json

import fastavro

from ..errors import HoodieFormatError
from ..format.log_file.data_block import avro_record_bounds
from ..format.log_file.log_block import BlockType, HeaderKey, LogBlock
from ..format.log_file.scanner import block_versions

DECODED = (BlockType.AVRO_DATA, BlockType.PARQUET_DATA, BlockType.DELETE)


def check_avro_content(block: LogBlock) -> None:
    """Raise HoodieFormatError naming the first record of an AVRO_DATA block that does not decode."""
    schema = fastavro.parse_schema(json.loads(block.header[HeaderKey.SCHEMA]))
    starts, ends = avro_record_bounds(block.content)
    view = memoryview(block.content)
    for i, (start, end) in enumerate(zip(starts.tolist(), ends.tolist())):
        record = io.BytesIO(view[start:end])
        try:
            fastavro.schemaless_reader(record, schema, return_record_name=False)
        except Exception as e:  # noqa: BLE001  (fastavro raises what the bytes lead it to)
            raise HoodieFormatError(f"Avro record {i} does not decode: {type(e).__name__}: {e}") from None
        if record.tell() != end - start:
            raise HoodieFormatError(f"Avro record {i}: decoded {record.tell()} bytes, record has {end - start}")


def check_block(block: LogBlock, path: str = "") -> None:
    """Raise when the content of a data or delete block does not decode (other blocks have no content to check)."""
    if block.block_type == BlockType.AVRO_DATA:
        check_avro_content(block)
    elif block.block_type in DECODED:
        block_versions([block], path=path)
