"""`validate`: check a table against what its timeline says.

1. missing_file: every base and log file a completed commit, delta commit, replace commit or compaction names in
   its write stats (partitionToWriteStats) exists, unless a completed clean or rollback deleted it since, or the
   plan of a pending clean deletes it (a clean a crash interrupted; the next writer or service finishes it);
2. corrupt_log_block: every block of every log file parses: its framing passes Hudi's corruption checks (a block
   HoodieLogFileReader would return as CORRUPT is a problem) and the content of its data and delete blocks
   decodes (Avro records, parquet, delete records);
3. stray_file: no data file of a failed or rolled-back instant: a base file whose instant, or a log file whose
   base instant and every block instant, is neither a completed nor a pending instant nor older than the active
   timeline (archived);
4. pending_compaction: every pending compaction plan can run: the base and log files its operations name exist and
   its marker directory holds only marker names (`compaction_check.py`); a plan that cannot run holds its file
   groups out of every later plan;
5. index_state: the keyed index state under `.hoodie/.aux/hoodie_stream/index/`, when the table has one, agrees
   with the latest snapshot (`index_check.py`).

Reads only: nothing is changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import HoodieError
from ..format.file_group.file_names import parse_base_file_name, parse_log_file_name
from ..format.hoodie_table import HoodieTable
from ..format.log_file.log_block import BlockType, HeaderKey
from ..format.log_file.reader import read_log_file
from .block_check import DECODED, check_block
from .compaction_check import check_pending_compactions
from .index_check import check_index
from .problems import Problem, capped
from .progress import progress
from .table_files import TableFiles, table_files

CHECKS = ("missing_file", "corrupt_log_block", "stray_file", "pending_compaction", "index_state")


@dataclass
class Report:
    table: str
    problems: list[Problem] = field(default_factory=list)
    checked: dict[str, int] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "valid": self.valid,
            "checked": self.checked,
            "problems": [p.to_dict() for p in self.problems],
        }

    def text(self) -> str:
        counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in self.checked.items())
        if self.valid:
            return f"{self.table}: valid ({counts})"
        lines = [f"{self.table}: {len(self.problems)} problem(s) ({counts})"]
        return "\n".join(lines + [f"  {p}" for p in self.problems])


def missing_files(files: TableFiles) -> list[Problem]:
    gone = files.deleted | files.cleaning
    return [
        Problem("missing_file", path, ts, "named by the completed instant's write stats, but does not exist")
        for path, ts in sorted(files.written.items())
        if path not in files.listed and path.rpartition("/")[2] not in gone
    ]


def _state_words(state: str) -> str:
    return {"rolled_back": "was rolled back", "unknown": "is not on the timeline (a failed write)"}.get(state, state)


def stray_base_files(files: TableFiles) -> list[Problem]:
    out = []
    for path in sorted(files.listed):
        parsed = parse_base_file_name(path.rpartition("/")[2])
        if parsed is None or path in files.written:
            continue
        state = files.instant_state(parsed.instant)
        if state in ("rolled_back", "unknown"):
            message = f"base file of instant {parsed.instant}, which {_state_words(state)}"
            out.append(Problem("stray_file", path, parsed.instant, message))
    return out


def check_log_file(table: HoodieTable, path: str, files: TableFiles) -> list[Problem]:
    """Problems of one log file: blocks that do not parse, or a file only failed instants wrote."""
    writer = files.written.get(path)
    base_instant = parse_log_file_name(path.rpartition("/")[2]).base_instant
    try:
        blocks = read_log_file(table.storage, path)
    except HoodieError as e:
        return [Problem("corrupt_log_block", path, writer, f"the log file does not parse: {e}")]
    out = []
    instants = set()
    for block in blocks:
        ts = block.header.get(HeaderKey.INSTANT_TIME)
        if ts:
            instants.add(ts)
        where = f"log block at offset {block.offset} ({block.size} bytes)"
        if block.block_type == BlockType.CORRUPT:
            out.append(Problem("corrupt_log_block", path, writer, f"{where} is corrupt (Hudi's reader skips it)"))
            continue
        if block.block_type in DECODED:
            try:
                check_block(block, path)
            except Exception as e:  # noqa: BLE001  (any decoding error names the block)
                out.append(Problem("corrupt_log_block", path, ts or writer, f"{where} does not decode: {e}"))
    if writer is None and path.rpartition("/")[2] not in files.neutralized:
        states = {files.instant_state(ts) for ts in instants or {base_instant}}
        if states and states <= {"rolled_back", "unknown"}:
            named = ", ".join(sorted(instants or {base_instant}))
            out.append(
                Problem(
                    "stray_file",
                    path,
                    min(instants or {base_instant}),
                    f"log file written only by instant(s) {named}, which are not completed, pending nor archived",
                )
            )
    return out


def validate(table: HoodieTable, index: bool = True, show_progress: bool | None = None) -> Report:
    """Run every check on the table (the index check only when `index` and the table has an index state)."""
    report = Report(table.path)
    files = table_files(table)
    logs = sorted(p for p in files.listed if parse_log_file_name(p.rpartition("/")[2]) is not None)
    report.checked = {
        "completed_instants": len(files.completed),
        "archived_instants": len(files.archived),
        "data_files": len(files.listed),
        "log_files": len(logs),
    }
    found: dict[str, list[Problem]] = {check: [] for check in CHECKS}
    found["missing_file"] = missing_files(files)
    found["stray_file"] = stray_base_files(files)
    report.checked["pending_compactions"], found["pending_compaction"] = check_pending_compactions(table, files)
    for path in progress(logs, "validate log files", total=len(logs), enabled=show_progress):
        for problem in check_log_file(table, path, files):
            found[problem.check].append(problem)
    if index:
        checked, problems = check_index(table, show_progress)
        if checked:
            report.checked["index_keys"] = checked
        found["index_state"] = problems
    for check in CHECKS:
        report.problems += capped(found[check], check)
    return report
