"""The columns a record carries between the stages of the write chain, and the kinds of routed records.

key-by adds KEY, PARTITION, DELETE and SEQ; Spark adds KEY_GROUP and ASSIGN_TASK for the key-group shuffle; bucket
assign adds FILE_ID, KIND and WRITE_TASK for the file-group shuffle. `_hoodie_record_key` and
`_hoodie_partition_path` are Hudi's meta column names; the others are the chain's own (`__hs_` prefix) and never
reach a file.
"""

from enum import IntEnum

KEY = "_hoodie_record_key"
PARTITION = "_hoodie_partition_path"
IS_DELETED = "_hoodie_is_deleted"  # the user's column marking a row-level delete
DELETE = "__hs_delete"
SEQ = "__hs_seq"  # arrival order within the micro-batch
KEY_GROUP = "__hs_key_group"
ASSIGN_TASK = "__hs_assign_task"
FILE_ID = "__hs_file_id"
KIND = "__hs_kind"
WRITE_TASK = "__hs_write_task"
CHAIN_PREFIX = "__hs_"


class RecordKind(IntEnum):
    """What bucket assign decided for a record (the KIND column, int8)."""

    UPDATE = 0  # a known key, written to its file group
    INSERT = 1  # a new key (or a key that moved partition), packed into a small or new file group
    DELETE_ORDERED = 2  # a delete competing by ordering value
    DELETE_NATURAL = 3  # a delete applied by arrival (no ordering value): operation=delete
    DELETE_MOVED = 4  # the old copy of a key that moved partition: a delete applied by arrival, counted as a move
