"""Crash safety of compaction and cleaning for real: the offline compaction (`python -m hoodie_stream compact
--schedule --run --clean`, plan -> execute -> commit -> clean) runs in a child process whose whole session is
SIGKILLed when the table shows a chosen step:
- "plan":    the plan is written (`.compaction.requested`) and execution has not started;
- "execute": the compaction is inflight and its first marker exists (base files are being written);
- "late":    the compaction is inflight and every operation's base file is finished (the commit is next);
- "clean":   a clean is requested or inflight (the cleaner deletes superseded slices).
After each kill the frozen table is classified (which step the kill really hit) and read by this project's reader
and by hudi-rs: both must equal the model, whatever the step. The child is then run again (`--run --clean`): the
compaction completes with exactly one base file per file group, no plan or clean stays pending, and both readers
(hudi-rs snapshot and read_optimized too) still equal the model.
"""

import os
import subprocess
import sys
import time

import pytest

from crash_harness import kill_session, timeline_state
from hoodie_stream.compaction.plan import pending_plans
from hoodie_stream.format.file_names import parse_base_file_name
from hoodie_stream.format.timeline import Timeline
from oracle import rs_read
from stream_model import table_rows
from test_compaction import _both_readers, _setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POLL = 0.001
TIMEOUT = 180
# ~5 log files per file group, 5 small file groups: execution takes seconds, cleaning deletes dozens of files
SETUP = dict(n=6, seed=41)


def _child(base, *args):
    env = dict(
        os.environ,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_SUBMIT_ARGS='--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell',
    )
    cmd = [
        sys.executable,
        "-m",
        "hoodie_stream",
        "compact",
        "--path",
        base,
        *args,
        "--option",
        "clean.retain_commits=1",
        "--option",
        "compaction.tasks=1",
    ]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _compaction(state):
    """(instant, 0 requested / 1 inflight / 2 completed) of the newest compaction, or (None, None)."""
    found = sorted((ts, s) for (ts, action), s in state.items() if action == "compaction")
    done = [ts for (ts, action), s in state.items() if action == "commit" and s == 2]
    if not found:
        return None, None
    ts, s = found[-1]
    return ts, 2 if ts in done else s


def _finished_base_files(base, instant):
    out = []
    for directory, _dirs, names in os.walk(base):
        if ".hoodie" in directory:
            continue
        out += [n for n in names if (p := parse_base_file_name(n)) is not None and p.instant == instant]
    return out


def _markers(base, instant):
    root = os.path.join(base, ".hoodie", ".temp", instant)
    return [n for _d, _s, names in os.walk(root) for n in names]


def _reached(target, base, ops):
    state = timeline_state(base)
    instant, s = _compaction(state)
    if target == "plan":
        return s == 0
    if target == "execute":
        return s == 1 and bool(_markers(base, instant))
    if target == "late":
        return s == 1 and len(_finished_base_files(base, instant)) >= ops
    if target == "clean":
        return any(action == "clean" and st < 2 for (_ts, action), st in state.items())
    raise ValueError(target)


def _classify(base):
    state = timeline_state(base)
    instant, s = _compaction(state)
    if any(action == "clean" and st < 2 for (_ts, action), st in state.items()):
        return "mid_clean"
    if s is None:
        return "before_plan"
    if s == 0:
        return "plan_written"
    if s == 1:
        return "before_commit" if len(_finished_base_files(base, instant)) >= _ops(base, instant) else "mid_execute"
    return "after_commit"


def _ops(base, instant):
    plan = pending_plans(Timeline(base)).get(instant)
    return len(plan["operations"]) if plan else 0


def _run_until(target, base, ops):
    """Start the child and SIGKILL its session once `target` shows on disk. Returns True if it was killed."""
    proc = _child(base, "--schedule", "--run", "--clean")
    deadline = time.monotonic() + TIMEOUT
    try:
        while proc.poll() is None:
            if _reached(target, base, ops):
                kill_session(proc, {proc.pid})
                return True
            assert time.monotonic() < deadline, f"the compaction child ran over {TIMEOUT}s"
            time.sleep(POLL)
        return False
    finally:
        if proc.poll() is None:
            kill_session(proc, {proc.pid})
        proc.stdout.close()


EXPECTED = {"plan": "plan_written", "execute": "mid_execute", "late": "before_commit", "clean": "mid_clean"}
ATTEMPTS = 3  # "late" and "clean" are short windows: a kill that lands past them is retried on a fresh table


@pytest.mark.parametrize("target", list(EXPECTED))
def test_sigkill_during_compaction_and_cleaning_then_restart(spark, tmp_path, target):
    phases = []
    for attempt in range(ATTEMPTS):
        base = str(tmp_path / f"t{attempt}")
        model, _ = _setup(spark, base, **SETUP)
        # file groups with log files: one plan operation each (log file names start with ".<file id>_")
        ops = len(
            {
                n.split("_")[0].lstrip(".")
                for d, _s, names in os.walk(base)
                if ".hoodie" not in d
                for n in names
                if ".log." in n
            }
        )
        assert ops >= 2
        killed = _run_until(target, base, ops)
        phase = _classify(base) if killed else "finished"
        phases.append(phase)
        _both_readers(base, model, f"after a SIGKILL at {phase}")
        if phase == EXPECTED[target]:
            break
    print(f"target {target}: phases hit {phases}")
    assert phases[-1] == EXPECTED[target], phases

    restart = _child(base, "--run", "--clean")
    out, _ = restart.communicate(timeout=TIMEOUT)
    assert restart.returncode == 0, out.decode(errors="replace")[-3000:]
    state = timeline_state(base)
    instant, s = _compaction(state)
    assert s == 2, (instant, s)
    pending = [
        (ts, action)
        for (ts, action), st in state.items()  # a completed compaction is `<ts>.commit`
        if st < 2 and not (action == "compaction" and state.get((ts, "commit")) == 2)
    ]
    assert not pending, f"nothing stays pending after the restart: {pending}"
    stats = Timeline(base).read_commit_metadata(instant).all_write_stats()
    assert len(stats) == ops
    assert sorted(_finished_base_files(base, instant)) == sorted(st.path.rsplit("/", 1)[-1] for st in stats)
    _both_readers(base, model, f"after the restart from {phase}")
    assert table_rows(rs_read(base, "read_optimized")) == model.rows()
