"""What hoodie.properties holds at each table version written here: 6 (Hudi 0.14/0.15), 8 (Hudi 1.0), 9 (Hudi 1.1,
1.2). A table is created at 6 unless `hoodie.write.table.version` asks for 8 or 9, and upgraded only when asked.

Versions 8 and 9 keep the version 6 keys and add (as Hudi's SevenToEight/EightToNine upgrade handlers and its table
creation set them): timeline layout 2 in `.hoodie/timeline/` with its history directory, the key generator's type,
and the merge settings Hudi 1.x derives from the payload class and the ordering field (`version_properties`).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..record.keygen import key_generator_type
from ..record.merge import COMMIT_TIME_ORDERING, EVENT_TIME_ORDERING

TABLE_VERSION = "6"  # the version a table is created at unless another is asked for
WRITE_VERSIONS = (6, 8, 9)
TIMELINE_PATH = "timeline"  # hoodie.timeline.path: layout 2's directory in .hoodie/
HISTORY_PATH = "history"  # hoodie.timeline.history.path: the LSM history's directory in the timeline's
EVENT_TIME_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
COMMIT_TIME_STRATEGY = "ce9acb64-bde0-424c-9b91-f6ebba25356d"
PAYLOAD_STRATEGY = "00000000-0000-0000-0000-000000000000"
_MODEL = "org.apache.hudi.common.model."
DEFAULT_PAYLOAD = _MODEL + "DefaultHoodieRecordPayload"
EVENT_TIME_PAYLOADS = {DEFAULT_PAYLOAD, _MODEL + "EventTimeAvroPayload"}
OVERWRITE_PAYLOAD = _MODEL + "OverwriteWithLatestAvroPayload"
# the payload classes version 9 keeps only as `hoodie.table.legacy.payload.class`, and those whose merge it expresses
# with partial-update modes and merge properties (not read here)
BUILT_IN_PAYLOADS = {
    _MODEL + name
    for name in (
        "AWSDmsAvroPayload",
        "DefaultHoodieRecordPayload",
        "EventTimeAvroPayload",
        "OverwriteNonDefaultsWithLatestAvroPayload",
        "OverwriteWithLatestAvroPayload",
        "PartialUpdateAvroPayload",
    )
} | {"org.apache.hudi.common.model.debezium." + n for n in ("MySqlDebeziumAvroPayload", "PostgresDebeziumAvroPayload")}
NOT_READ_AT_9 = BUILT_IN_PAYLOADS - EVENT_TIME_PAYLOADS - {OVERWRITE_PAYLOAD}


def version_properties(
    props: Mapping[str, str], to: int, initial: int | str = TABLE_VERSION
) -> tuple[dict[str, str], list[str]]:
    """(keys set, keys removed) that take the properties `props` of a version 6 or 8 table to version `to` (8 or 9),
    as Hudi's upgrade handlers change them (SevenToEight, then EightToNine); `initial`: the table's
    `hoodie.table.initial.version` when it was at 6."""
    updates: dict[str, str] = {}
    deletes: list[str] = []
    if int(props.get("hoodie.table.version") or TABLE_VERSION) < 8:
        updates = _eight(props, initial)
    if to >= 9:
        merged = {**props, **updates}
        nine, deletes = _nine(merged)
        updates = {k: v for k, v in {**updates, **nine}.items() if k not in deletes}
    return updates, deletes


def _eight(props: Mapping[str, str], initial: int | str) -> dict[str, str]:
    ordering = (props.get("hoodie.table.precombine.field") or "").strip()
    merge_on_read = props.get("hoodie.table.type", "COPY_ON_WRITE") == "MERGE_ON_READ"
    # no payload class: Hudi's default (DefaultHoodieRecordPayload), event-time ordering as version 6 reads it, and
    # commit-time ordering without an ordering field
    payload = (props.get("hoodie.compaction.payload.class") or "").strip() or (
        DEFAULT_PAYLOAD if ordering else OVERWRITE_PAYLOAD
    )
    updates = {
        "hoodie.table.version": "8",
        "hoodie.timeline.layout.version": "2",
        "hoodie.timeline.path": TIMELINE_PATH,
        "hoodie.timeline.history.path": HISTORY_PATH,
        "hoodie.table.initial.version": str(initial),
    }
    keygen = (props.get("hoodie.table.keygenerator.class") or "").strip()
    if keygen:
        updates["hoodie.table.keygenerator.type"] = key_generator_type(keygen)
    if payload and payload not in EVENT_TIME_PAYLOADS | {OVERWRITE_PAYLOAD}:
        mode, strategy = "CUSTOM", PAYLOAD_STRATEGY
    elif (merge_on_read and ordering) or payload in EVENT_TIME_PAYLOADS:
        mode, strategy = EVENT_TIME_ORDERING, EVENT_TIME_STRATEGY
        payload = payload if payload in EVENT_TIME_PAYLOADS and not merge_on_read else DEFAULT_PAYLOAD
    else:
        mode, strategy, payload = COMMIT_TIME_ORDERING, COMMIT_TIME_STRATEGY, OVERWRITE_PAYLOAD
    updates.update(
        {
            "hoodie.record.merge.mode": mode,
            "hoodie.record.merge.strategy.id": strategy,
            "hoodie.compaction.payload.class": payload,
        }
    )
    return updates


def _nine(props: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Version 8 properties to 9 (EightToNine): the strategy id goes unless the mode is CUSTOM, a built-in payload
    class becomes the legacy payload class, the precombine field the ordering fields."""
    updates = {"hoodie.table.version": "9"}
    deletes = []
    if (props.get("hoodie.record.merge.mode") or "").strip() != "CUSTOM" and "hoodie.record.merge.strategy.id" in props:
        deletes.append("hoodie.record.merge.strategy.id")
    payload = (props.get("hoodie.compaction.payload.class") or "").strip()
    if payload in BUILT_IN_PAYLOADS:
        updates["hoodie.table.legacy.payload.class"] = payload
        deletes.append("hoodie.compaction.payload.class")
    ordering = (props.get("hoodie.table.precombine.field") or "").strip()
    if ordering:
        updates["hoodie.table.ordering.fields"] = ordering
        deletes.append("hoodie.table.precombine.field")
    return updates, deletes
