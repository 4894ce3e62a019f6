"""A Python child process driven by JSON lines: one request per line on its stdin, one answer per request on its
stdout after a marker (its JVM may print other lines, or text before the marker on the same line). Its PySpark
runs on the interpreter given, with no PYSPARK_/SPARK_/PYTHONPATH settings of this process. Used by the Java Hudi
oracle (tests/java_hudi.py) and the benchmarks' Spark peers (benchmarks/spark_peer.py)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections import deque
from pathlib import Path


class JsonChild:
    """`python argv...` in `workdir`; `request(req)` sends a dict and returns the child's answer (a dict). An
    answer not there within `timeout` seconds (None: no limit), or a child that ended, raises RuntimeError with
    the end of its stderr, naming the child by `name`."""

    def __init__(self, name: str, python: Path, argv: list[str], marker: str, workdir: Path, timeout=None):
        self.name = name
        self.marker = marker
        self.timeout = timeout
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "SPARK_", "PYTHONPATH"))}
        env["PYSPARK_PYTHON"] = str(python)
        self.proc = subprocess.Popen(
            [str(python), *map(str, argv)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=workdir,
            env=env,
        )
        self._stderr: deque[str] = deque(maxlen=300)
        self._answers: queue.Queue[dict | None] = queue.Queue()
        self._lock = threading.Lock()
        self._drains = [
            threading.Thread(target=self._drain_stderr, daemon=True),
            threading.Thread(target=self._drain_stdout, daemon=True),
        ]
        for t in self._drains:
            t.start()
        self._answer()  # ready

    def _drain_stderr(self):
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._stderr.append(line)

    def _drain_stdout(self):
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            at = line.find(self.marker)
            if at >= 0:
                self._answers.put(json.loads(line[at + len(self.marker) :]))
        self._answers.put(None)  # the child closed its stdout

    def _answer(self) -> dict:
        try:
            answer = self._answers.get(timeout=self.timeout)
        except queue.Empty:
            self.proc.kill()
            answer = None
        if answer is not None:
            return answer
        code = self.proc.wait()
        self._drains[0].join(10)
        tail = "".join(self._stderr)[-4000:]
        limit = f", or no answer in {self.timeout}s" if self.timeout else ""
        raise RuntimeError(f"{self.name} ended ({code}{limit}):\n{tail}")

    def request(self, req: dict) -> dict:
        with self._lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            return self._answer()

    def close(self, wait: float = 60) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
