"""Apache Hudi itself as the oracle: Hudi 0.15.0 and 1.2.0 on their own pyspark 3.5 (.venv-hudi, set up by
scripts/setup-hudi-oracle.sh), one JVM per Hudi version for the whole test session, started on first use.

`JavaHudi.read` answers a query as Hudi's Spark datasource answers it (an Arrow table); `write` commits rows with
Hudi's Spark writer; `sql` runs Spark SQL in Hudi's session (its procedures: `CALL run_compaction`, `run_clean`...).
`compare_reads` checks one of this project's tables against Hudi for every query type.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from json_child import JsonChild
from oracle import rows

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-hudi"
JARS = VENV / "jars"
DRIVER = Path(__file__).resolve().parent / "hudi_oracle" / "driver.py"
ANSWER = "@@hudi-oracle@@ "
VERSIONS = ("0.15.0", "1.2.0")
SETUP = "bash scripts/setup-hudi-oracle.sh"


class JavaHudiError(AssertionError):
    """Hudi failed a request: the Java exception's text."""


def oracle_missing() -> str | None:
    """Why the oracle cannot start here, or None."""
    if not (VENV / ".stamp").exists():
        return f"the Java Hudi oracle is not set up ({VENV} missing): run `{SETUP}` (needs Java 17 and Maven)"
    return None


class JavaHudi:
    """One Hudi version's JVM (a pyspark 3.5 driver process with the Hudi bundle on its class path)."""

    def __init__(self, version: str):
        if version not in VERSIONS:
            raise ValueError(f"Hudi {version}: the oracle has {VERSIONS}")
        missing = oracle_missing()
        if missing:
            raise RuntimeError(missing)
        self.version = version
        self.workdir = Path(tempfile.mkdtemp(prefix=f"java-hudi-{version}-"))
        jars = [str(p) for p in sorted((JARS / f"hudi-{version}").glob("*.jar")) + sorted((JARS / "s3a").glob("*.jar"))]
        self._child = JsonChild(
            f"the Hudi {version} oracle", VENV / "bin" / "python", [DRIVER, *jars], ANSWER, self.workdir
        )
        self._count = 0

    def request(self, **req) -> dict:
        answer = self._child.request(req)
        if "error" in answer:
            raise JavaHudiError(f"Hudi {self.version}: {answer['error']}")
        return answer

    def _out(self) -> Path:
        self._count += 1
        return self.workdir / f"answer-{self._count}"

    def read(self, path: str, options: dict | None = None) -> pa.Table:
        """Hudi's answer to `spark.read.format("hudi").options(options).load(path)`."""
        out = self._out()
        self.request(op="read", path=_s3a(path), options=options or {}, out=str(out))
        return pq.read_table(out) if any(out.glob("*.parquet")) else None

    def write(self, path: str, data: pa.Table, options: dict, mode: str = "append") -> None:
        """Commit `data` with Hudi's Spark writer (`df.write.format("hudi").options(options).mode(mode)`)."""
        src = self._out().with_suffix(".parquet")
        pq.write_table(data, src)
        self.request(op="write", path=_s3a(path), input=str(src), options=options, mode=mode)

    def stream_write(self, path: str, batches: list[pa.Table], options: dict) -> None:
        """Write `batches` with Hudi's Structured Streaming sink (`writeStream.format("hudi")`), one micro-batch
        each, in one availableNow query."""
        src = self._out()
        src.mkdir()
        for i, batch in enumerate(batches):
            pq.write_table(batch, src / f"part-{i:04d}.parquet")
            os.utime(src / f"part-{i:04d}.parquet", (1_700_000_000 + i, 1_700_000_000 + i))  # read in this order
        self.request(op="stream_write", path=_s3a(path), input=str(src), checkpoint=str(src) + "-chk", options=options)

    def sql(self, statement: str) -> list[dict]:
        return self.request(op="sql", sql=statement)["rows"]

    def hadoop_conf(self, conf: dict[str, str]) -> None:
        self.request(op="hadoop", conf=conf)

    def close(self) -> None:
        self._child.close()


_STARTED: dict[str, JavaHudi] = {}


def oracle(version: str) -> JavaHudi:
    """The oracle of a Hudi version, started on first use and kept until close_oracles()."""
    if version not in _STARTED:
        _STARTED[version] = JavaHudi(version)
    return _STARTED[version]


def close_oracles() -> None:
    while _STARTED:
        _STARTED.popitem()[1].close()


def _s3a(path: str) -> str:
    return "s3a://" + path[len("s3://") :] if path.startswith("s3://") else path


def s3a_conf(options: dict[str, str]) -> dict[str, str]:
    """Hadoop s3a settings for the S3 test server's storage options (hudi-rs / object_store key names)."""
    return {
        "fs.s3a.endpoint": options["aws_endpoint_url"],
        "fs.s3a.access.key": options["aws_access_key_id"],
        "fs.s3a.secret.key": options["aws_secret_access_key"],
        "fs.s3a.path.style.access": "true",
        "fs.s3a.connection.ssl.enabled": "false",
        "fs.s3a.endpoint.region": options.get("aws_region", "us-east-1"),
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "fs.s3a.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
    }


# -- queries ---------------------------------------------------------------------------------------------------------
def snapshot(as_of: str | None = None) -> dict[str, str]:
    opts = {"hoodie.datasource.query.type": "snapshot"}
    if as_of:
        opts["as.of.instant"] = as_of
    return opts


def read_optimized(as_of: str | None = None) -> dict[str, str]:
    opts = {"hoodie.datasource.query.type": "read_optimized"}
    if as_of:
        opts["as.of.instant"] = as_of
    return opts


def incremental(begin: str, end: str | None = None) -> dict[str, str]:
    opts = {"hoodie.datasource.query.type": "incremental", "hoodie.datasource.read.begin.instanttime": begin}
    if end:
        opts["hoodie.datasource.read.end.instanttime"] = end
    return opts


def same_rows(ours: pa.Table, theirs: pa.Table | None, columns=None) -> tuple[bool, str]:
    """Whether two answers hold the same multiset of rows over `columns` (default: ours, meta columns included);
    a short description of the first difference otherwise."""
    columns = columns or sorted(ours.column_names)
    if theirs is None:
        return ours.num_rows == 0, f"Hudi read nothing, we read {ours.num_rows} rows"
    missing = [c for c in columns if c not in theirs.column_names]
    if missing:
        return False, f"Hudi's answer has no column {missing} (it has {theirs.column_names})"
    theirs = theirs.select(columns).cast(ours.select(columns).schema, safe=False)
    a, b = rows(ours, columns), rows(theirs, columns)
    if a == b:
        return True, ""
    only_ours = [r for r in a if r not in b][:3]
    only_theirs = [r for r in b if r not in a][:3]
    return False, f"{len(a)} rows vs Hudi's {len(b)}; only ours: {only_ours}; only Hudi's: {only_theirs}"
