"""Scan the log files of a file slice into the record versions that count.

Blocks are taken in log order. A block counts only when its INSTANT_TIME is a completed commit-like instant
(<= as_of) or older than the active timeline (archived; `timeline.CommittedInstants`); a rollback command block cancels the blocks of its target instant read before it; corrupt blocks
are skipped. Data blocks become Arrow tables, delete blocks become delete versions; a block of partial updates
(IS_PARTIAL) becomes a Version naming the columns its schema has (`merge.lay_over` merges it).
"""

import json

import pyarrow as pa

from ...errors import HoodieFormatError
from ..avro.decoder import decode_field, decode_records
from ..record.merge import KEY, Version, delete_version
from .data_block import avro_record_bounds, read_parquet_content
from .delete_block import parse_delete_content
from .log_block import ROLLBACK_COMMAND, BlockType, HeaderKey
from .reader import read_log_file


def valid_blocks(storage, log_paths, counts):
    """Blocks of the log files in order, keeping those whose instant passes `counts(instant)`."""
    kept = []
    for path in log_paths:
        for block in read_log_file(storage, path):
            if block.block_type == BlockType.CORRUPT:
                continue
            instant = block.header.get(HeaderKey.INSTANT_TIME)
            if block.block_type == BlockType.COMMAND:
                if block.header.get(HeaderKey.COMMAND_BLOCK_TYPE) == ROLLBACK_COMMAND and counts(instant):
                    target = block.header.get(HeaderKey.TARGET_INSTANT_TIME)
                    kept = [b for b in kept if b.header.get(HeaderKey.INSTANT_TIME) != target]
                continue
            if block.block_type == BlockType.CDC_DATA or not counts(instant):
                continue
            kept.append(block)
    return kept


def block_versions(blocks, ordering_field=None, ordering_type=None, path=""):
    """Turn data and delete blocks into merge Versions, in order."""
    return list(iter_block_versions(blocks, ordering_field, ordering_type, path))


def iter_block_versions(blocks, ordering_field=None, ordering_type=None, path="", chunk_rows=None):
    """block_versions, one Version at a time; with `chunk_rows`, an AVRO_DATA block decoded that many records at a
    time (a Version each)."""
    for block in blocks:
        partial = is_partial(block)
        if block.block_type == BlockType.AVRO_DATA:
            starts, ends = avro_record_bounds(block.content)
            step = max(chunk_rows or len(starts), 1)
            columns = _schema_columns(block) if partial else None
            for i in range(0, max(len(starts), 1), step):  # an empty block is one empty Version
                yield Version(block_records(block, slice(i, i + step), (starts, ends)), columns=columns)
        elif block.block_type == BlockType.PARQUET_DATA:
            table = read_parquet_content(block.content)
            yield Version(table, columns=table.column_names if partial else None)
        elif block.block_type == BlockType.DELETE:
            entries = parse_delete_content(block.content, with_wrapper=True)
            keys = [e[0] for e in entries]
            partitions = [e[1] for e in entries]
            values = [_natural(e[2]) for e in entries]
            yield delete_version(keys, partitions, values, ordering_field, ordering_type)
        else:
            raise HoodieFormatError(f"{path}: log block type {block.block_type!r} cannot be read here")


def is_partial(block):
    """Whether a data block holds partial updates (header IS_PARTIAL "true", written by Hudi 1.x's MERGE INTO on
    table version 8 and later): its SCHEMA holds the meta fields and a subset of the table's columns."""
    return str(block.header.get(HeaderKey.IS_PARTIAL, "")).lower() == "true"


def _schema_columns(block):
    return [f["name"] for f in json.loads(block.header[HeaderKey.SCHEMA])["fields"]]


def block_records(block, rows=slice(None), bounds=None):
    """The records of an AVRO_DATA or CDC_DATA block (its `rows`), decoded with the block's own schema."""
    starts, ends = bounds or avro_record_bounds(block.content)
    writer_schema = json.loads(block.header[HeaderKey.SCHEMA])
    return decode_records(block.content, starts[rows], writer_schema, ends=ends[rows])


def block_keys(blocks, path=""):
    """The record keys of data and delete blocks, an Arrow string array per block, decoding no other column of an
    AVRO_DATA block than those before the key (the meta columns lead the records)."""
    keys = []
    for block in blocks:
        if block.block_type == BlockType.AVRO_DATA:
            starts, ends = avro_record_bounds(block.content)
            writer_schema = json.loads(block.header[HeaderKey.SCHEMA])
            keys.append(decode_field(block.content, starts, ends, writer_schema, KEY).cast(pa.string()))
        elif block.block_type == BlockType.PARQUET_DATA:
            keys.append(read_parquet_content(block.content, columns=[KEY])[KEY].combine_chunks().cast(pa.string()))
        elif block.block_type == BlockType.DELETE:
            keys.append(pa.array([e[0] for e in parse_delete_content(block.content)], pa.string()))
        else:
            raise HoodieFormatError(f"{path}: log block type {block.block_type!r} cannot be read here")
    return keys


def _natural(wrapped):
    """Hudi writes IntWrapper(0) for 'no ordering value'; such a delete applies by arrival. A real ordering value
    (e.g. LongWrapper(0) for a long precombine field) competes like any other version."""
    if wrapped is None or wrapped == ("IntWrapper", 0):
        return None
    return wrapped[1]


def slice_versions(storage, log_paths, counts, ordering_field=None, ordering_type=None):
    """Merge versions of the blocks that count in the log files at `log_paths` (relative to the storage root)."""
    return block_versions(valid_blocks(storage, log_paths, counts), ordering_field, ordering_type)
