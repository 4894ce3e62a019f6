"""Merging small archive files, as Hudi 0.15's HoodieTimelineArchiver merges them on storage without appends.

Every archiving run writes one new archive file (this project's storage, local or object store, never appends to a
file): without merging, `.hoodie/archived/` would gain a file per run for the table's whole life. After a run wrote
its file, when the newest archive files up to the first one over `hoodie.archive.merge.small.file.limit.bytes` are
at least `hoodie.archive.merge.files.batch.size`, their blocks are written into one new file (the next version, so
versions still follow the instants' order) and they are deleted. The files in `archived/` then stay below that
batch size plus one per 20 MB of archived history.

Crash safety, Hudi's four steps: the plan (`archived/mergeArchivePlan`, a HoodieMergeArchiveFilePlan Avro container:
the candidates' paths and the merged file's name) is written first, then the merged file, then the candidates are
deleted, then the plan. An interrupted merge is settled by the next archiving run before it writes
(`finish_interrupted_merge`): with every candidate still there the merged file is deleted (it may be missing or
whole: files are created whole), else the merge is completed by deleting the candidates left; then the plan goes. In
between, readers see some instants in two files and take them once (`ArchivedTimeline`).
"""

from __future__ import annotations

import logging

from ..format.avro.models import read_container, write_container
from ..format.log_file.log_block import BlockType
from ..format.log_file.reader import read_log_file
from ..format.log_file.writer import write_log_file
from ..format.timeline.archived_timeline import archive_dir, archive_file_name, archive_files
from ..storage import Storage

log = logging.getLogger("hoodie_stream.compaction")
PLAN_NAME = "mergeArchivePlan"  # HoodieArchivedTimeline.MERGE_ARCHIVE_PLAN_NAME
PLAN_MODEL = "HoodieMergeArchiveFilePlan"


def _plan_path(folder: str) -> str:
    return f"{archive_dir(folder)}/{PLAN_NAME}"


def _in_folder(folder: str, path: str) -> str:
    """A candidate of a plan (Hudi writes full paths, in its own file system's scheme): the archive file of that name."""
    return f"{archive_dir(folder)}/{path.rstrip('/').rpartition('/')[2]}"


def finish_interrupted_merge(storage: Storage, folder: str) -> None:
    """Settle a merge a crash interrupted (Hudi's verifyLastMergeArchiveFilesIfNecessary): its plan, when there is
    one, is rolled back (every candidate still there: the merged file goes) or completed (the candidates left go)."""
    plan_path = _plan_path(folder)
    if not storage.exists(plan_path):
        return
    try:
        plan = read_container(storage.read(plan_path))
    except Exception:  # a plan torn while written: nothing of the merge happened yet
        log.warning("%s: unreadable archive merge plan, removed", storage.uri_of(plan_path))
        storage.delete(plan_path)
        return
    candidates = [_in_folder(folder, p) for p in plan.get("candidate") or []]
    merged = f"{archive_dir(folder)}/{plan.get('mergedArchiveFileName')}"
    if all(storage.exists(p) for p in candidates):
        storage.delete(merged)
        log.info("%s: an interrupted merge of %d archive files rolled back", storage.uri_of(""), len(candidates))
    elif storage.exists(merged):
        for path in candidates:
            storage.delete(path)
        log.info("%s: an interrupted merge of %d archive files completed", storage.uri_of(""), len(candidates))
    storage.delete(plan_path)


def merge_small_archive_files(storage: Storage, folder: str, batch_files: int, small_bytes: int) -> str | None:
    """Merge the newest archive files up to the first one over `small_bytes` when they are at least `batch_files`
    (Hudi's mergeArchiveFilesIfNecessary). Returns the merged file's path, None when nothing was merged."""
    files = archive_files(storage, folder)  # oldest version first
    candidates = []
    for _version, info in reversed(files):
        if info.size > small_bytes:
            break
        candidates.append(info)
    if len(candidates) < batch_files:
        return None
    candidates.reverse()  # oldest first: the merged file keeps the records in the order they were archived
    name = archive_file_name(files[-1][0] + 1)
    plan = {"candidate": [storage.uri_of(info.path) for info in candidates], "mergedArchiveFileName": name}
    storage.create(_plan_path(folder), write_container(PLAN_MODEL, plan))
    # the candidates' AVRO_DATA blocks, copied as they are (Hudi decodes their records and encodes them again in
    # blocks of hoodie.commits.archival.batch: the same records in the same order; readers take blocks alike).
    # Decoding would hold every record of up to 20 MB of archive as Python objects on the driver.
    blocks = [
        block
        for info in candidates
        for block in read_log_file(storage, info.path)
        if block.block_type == BlockType.AVRO_DATA  # (a torn block is skipped, as readers skip it)
    ]
    path = f"{archive_dir(folder)}/{name}"
    write_log_file(storage, path, blocks)
    for info in candidates:
        storage.delete(info.path)
    storage.delete(_plan_path(folder))
    log.info("%s: merged %d small archive files into %s", storage.uri_of(""), len(candidates), storage.uri_of(path))
    return path
