"""The real CDC pipeline of the `cdc_real` tests: scripts/cdc-env.sh's environment (PostgreSQL with logical
replication, a KRaft Kafka broker, Kafka Connect with Debezium's PostgreSQL connector), connectors registered
through Connect's REST API, Spark's Kafka source into DebeziumSink, and PostgreSQL's own rows as the ground truth.

- `CdcEnv(directory)`: `cdc-env.sh start DIRECTORY` (its export lines in `.env`), `.stop()`; `.sql()` a psycopg
  connection in autocommit; `.connector(name, prefix, ...)` registers a Debezium connector.
The comparison itself is hoodie_stream.debezium.source_check's.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV_SCRIPT = ROOT / "scripts" / "cdc-env.sh"
SPARK_KAFKA_JARS = ROOT / ".cdc-env" / "jars" / "spark-kafka"


def spark_kafka_jars() -> list[str]:
    """The jars of Spark's Kafka source that `cdc-env.sh install` copied ([] before)."""
    if not SPARK_KAFKA_JARS.is_dir():
        return []
    return sorted(str(p) for p in SPARK_KAFKA_JARS.glob("*.jar"))


class CdcEnv:
    def __init__(self, directory: Path, timeout: float = 600) -> None:
        self.directory = Path(directory)
        done = subprocess.run(
            ["bash", str(ENV_SCRIPT), "start", str(self.directory)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"cdc-env.sh start failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        self.env: dict[str, str] = {}
        for line in done.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = value
        self.connect_url = self.env["KAFKA_CONNECT_URL"]
        self.bootstrap = self.env["KAFKA_BOOTSTRAP_SERVERS"]

    def stop(self) -> None:
        subprocess.run(["bash", str(ENV_SCRIPT), "stop", str(self.directory)], capture_output=True, timeout=180)

    def restart_connect(self, kill: bool = False) -> None:
        """Kafka Connect stopped (SIGTERM: its tasks commit their offsets; `kill`: SIGKILL, they do not) and started
        again; its connectors resume from their last committed offsets."""
        script = str(ENV_SCRIPT)
        pid = (self.directory / "run" / "connect.pid").read_text().strip()
        subprocess.run(["kill", "-KILL" if kill else "-TERM", pid], check=True)
        deadline = time.monotonic() + 60
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.2)
        done = subprocess.run(["bash", script, "start", str(self.directory)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-4000:]

    # -- PostgreSQL ------------------------------------------------------------------------------------------
    def sql(self):
        import psycopg

        e = self.env
        return psycopg.connect(
            host=e["PGHOST"],
            port=int(e["PGPORT"]),
            user=e["PGUSER"],
            password=e["PGPASSWORD"],
            dbname=e["PGDATABASE"],
            autocommit=True,
        )

    # -- Kafka Connect ---------------------------------------------------------------------------------------
    def rest(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.connect_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                text = answer.read()
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"Kafka Connect {method} {path}: {err.code} {err.read()[:2000]!r}") from None
        return json.loads(text) if text else None

    def connector(self, prefix: str, schema: str, **config: object) -> Connector:
        """Debezium's PostgreSQL connector on `schema`, topics `<prefix>.<schema>.<table>`, running."""
        name = f"pg-{prefix}"
        e = self.env
        settings = {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": e["PGHOST"],
            "database.port": e["PGPORT"],
            "database.user": e["PGUSER"],
            "database.password": e["PGPASSWORD"],
            "database.dbname": e["PGDATABASE"],
            "topic.prefix": prefix,
            "plugin.name": "pgoutput",
            "slot.name": f"slot_{prefix}",
            "schema.include.list": schema,
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": "1",
            **{k: str(v) for k, v in config.items()},
        }
        self.rest("PUT", f"/connectors/{name}/config", settings)
        connector = Connector(self, name, settings["slot.name"])
        connector.wait_running()
        return connector


class Connector:
    def __init__(self, env: CdcEnv, name: str, slot: str) -> None:
        self.env, self.name, self.slot = env, name, slot

    def status(self) -> dict:
        return self.env.rest("GET", f"/connectors/{self.name}/status")

    def wait_running(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                status = self.status()
            except RuntimeError:
                status = {}
            tasks = status.get("tasks", [])
            if status.get("connector", {}).get("state") == "RUNNING" and tasks:
                states = {t["state"] for t in tasks}
                if states == {"RUNNING"}:
                    return
                if "FAILED" in states:
                    raise AssertionError(f"connector {self.name} failed: {tasks}")
            assert time.monotonic() < deadline, f"connector {self.name} not running after {timeout}s: {status}"
            time.sleep(0.5)

    def confirmed_lsn(self) -> str | None:
        """The LSN the connector last confirmed to its replication slot (after Kafka Connect committed the offset of
        the events up to it)."""
        with self.env.sql() as conn:
            row = conn.execute(
                "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
            ).fetchone()
        return None if row is None else row[0]

    def delete(self) -> None:
        """The connector removed, then its replication slot (once no longer active)."""
        self.env.rest("DELETE", f"/connectors/{self.name}")
        with self.env.sql() as conn:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                row = conn.execute(
                    "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
                ).fetchone()
                if row is None:
                    return
                if not row[0]:
                    conn.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
                    return
                time.sleep(0.2)


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"
