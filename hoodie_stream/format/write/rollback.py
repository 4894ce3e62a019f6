"""Roll back a pending write instant: remove the files it wrote and its timeline files, record a rollback.

Files written by the instant are found from its markers, plus any base file named with its instant and any log
file of a file group it created (base instant = the failed instant). Our writers never append to an existing log
file, so deleting whole files is exact; rollback command blocks are not needed for our own writes.
The rollback itself goes requested -> inflight -> completed with Hudi's Avro plan and metadata, and is
idempotent: an interrupted rollback is finished by `finish_pending_rollbacks`.
"""

import time

from ...storage import storage_for
from ..avro.models import read_container, write_container
from ..file_group.file_names import parse_base_file_name, parse_log_file_name
from ..file_group.fs_view import list_partitions
from ..table.markers import delete_markers, list_markers
from ..timeline.instant import Instant


def files_of_instant(storage, ts):
    """Relative paths of the data files a (failed) instant wrote."""
    storage = storage_for(storage)
    found = set(path for path, _io in list_markers(storage, ts))
    for partition in list_partitions(storage):
        for info in storage.list(partition):
            parsed_base = parse_base_file_name(info.name)
            parsed_log = parse_log_file_name(info.name)
            if (parsed_base and parsed_base.instant == ts) or (parsed_log and parsed_log.base_instant == ts):
                found.add(info.path)
    return sorted(found)


def _split(rel):
    partition, _, name = rel.rpartition("/")
    return partition, name


def rollback_plan(storage, instant):
    requests = {}
    for rel in files_of_instant(storage, instant.timestamp):
        partition, name = _split(rel)
        parsed = parse_base_file_name(name) or parse_log_file_name(name)
        file_id = parsed.file_id if parsed else ""
        req = requests.setdefault(
            (partition, file_id),
            {
                "partitionPath": partition,
                "fileId": file_id,
                "latestBaseInstant": getattr(parsed, "base_instant", None) or getattr(parsed, "instant", None),
                "filesToBeDeleted": [],
                "logBlocksToBeDeleted": {},
            },
        )
        req["filesToBeDeleted"].append(storage.uri_of(rel))
    return {
        "instantToRollback": {"commitTime": instant.timestamp, "action": instant.action},
        "RollbackRequests": list(requests.values()),
        "version": 1,
    }


def rollback_instant(storage, timeline, instant):
    """Roll back one pending instant (requested or inflight)."""
    storage = storage_for(storage)
    plan = rollback_plan(storage, instant)
    ts = timeline.create_new("rollback", write_container("HoodieRollbackPlan", plan))
    timeline.transition_to_inflight(ts, "rollback", b"")
    _execute(storage, timeline, ts, plan)


def rollback_if_pending(storage, timeline, ts):
    """Roll back the instant at `ts` when it is pending (requested or inflight); True when it was."""
    timeline.reload()
    inst = timeline.get(ts)
    if inst is None or inst.is_completed:
        return False
    rollback_instant(storage, timeline, inst)
    return True


def _execute(storage, timeline, ts, plan):
    started = time.time()
    target = plan["instantToRollback"]
    partitions = {}
    deleted = 0
    for req in plan["RollbackRequests"]:
        meta = partitions.setdefault(
            req["partitionPath"],
            {
                "partitionPath": req["partitionPath"],
                "successDeleteFiles": [],
                "failedDeleteFiles": [],
                "rollbackLogFiles": {},
                "logFilesFromFailedCommit": {},
            },
        )
        for path in req["filesToBeDeleted"]:
            storage.delete(storage.relative(path))
            meta["successDeleteFiles"].append(path)
            deleted += 1
    timeline.delete_instant_files(target["commitTime"], target["action"])
    delete_markers(storage, target["commitTime"])
    metadata = {
        "startRollbackTime": ts,
        "timeTakenInMillis": int((time.time() - started) * 1000),
        "totalFilesDeleted": deleted,
        "commitsRollback": [target["commitTime"]],
        "partitionMetadata": partitions,
        "version": 1,
        "instantsRollback": [{"commitTime": target["commitTime"], "action": target["action"]}],
    }
    timeline.complete(ts, "rollback", write_container("HoodieRollbackMetadata", metadata))
    timeline.reload()


def finish_pending_rollbacks(storage, timeline):
    """Complete rollbacks a crash interrupted (their plan says what to delete; deleting again is harmless)."""
    done = []
    for inst in timeline.pending(["rollback"]):
        plan = read_container(timeline.read_bytes(Instant(inst.timestamp, "rollback", "requested")))
        if inst.state == "requested":
            timeline.transition_to_inflight(inst.timestamp, "rollback", b"")
        _execute(storage_for(storage), timeline, inst.timestamp, plan)
        done.append(inst.timestamp)
    return done
