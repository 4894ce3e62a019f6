"""Bad table locations on the S3 server (tests/s3_server.py), through every entry point: the sink (its constructor
and its first micro-batch), HoodieTable, offline compaction and cleaning, and the command line (`python -m
hoodie_stream summary|compact|clean --storage-option KEY=VALUE`, exit code 2 with the message on stderr).

An unknown scheme, a missing bucket, refused credentials and a prefix holding objects that are not a Hudi table are
each refused before anything is written (the server's buckets and objects unchanged; no local directory named
after the URI), with an error naming the location and the cause and no secret value in the error, the logs or the
output. `file://` URIs work as plain paths do."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
import uuid

import pytest

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.__main__ import main
from hoodie_stream.compaction.offline import clean_table, compact_table
from hoodie_stream.errors import HoodieError
from oracle import rs_read
from s3_server import SECRET_KEY, S3Server
from stream_model import OPTIONS, TableModel, events_df, generate_batches, table_rows

WRONG_SECRET = "wrong-secret-value-0123456789"
SESSION_TOKEN = "session-token-secret-abcdef"
BATCH = generate_batches(1, seed=4, keys_per_batch=10, key_space=20)[0]


@pytest.fixture(scope="module")
def auth_server():
    """A server that checks credentials."""
    server = S3Server(auth=True)
    yield server
    server.stop()


LEASE = "/.hoodie/.locks/table_lock.json"


def server_state(server, uri):
    """Every bucket and object of a server (through its own, valid credentials), but the leases of other tables:
    the sinks of earlier tests on this server that were never closed keep renewing theirs."""
    prefix = uri.split("/", 3)[3] + "/" if uri.startswith("s3://") and uri.count("/") >= 3 else ""
    client = server.client()
    state = {}
    for bucket in client.list_buckets()["Buckets"]:
        keys = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket["Name"]):
            keys += [
                (o["Key"], o["Size"], o["ETag"])
                for o in page.get("Contents", [])
                if not (o["Key"].endswith(LEASE) and not o["Key"].startswith(prefix))
            ]
        state[bucket["Name"]] = sorted(keys)
    return state


def local_entries(*dirs):
    return {d: sorted(os.listdir(d)) for d in dirs}


@pytest.fixture(
    params=[
        "unknown-scheme",
        "missing-bucket",
        "wrong-secret",
        "wrong-session-token",
        "non-hudi-prefix",
    ]
)
def bad_location(request, tmp_path, monkeypatch):
    """(uri, storage options, secret values, pattern of the cause, server or None) of a location that must be
    refused; the working directory is an empty directory of the test's."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    kind = request.param
    if kind == "unknown-scheme":
        return "foo://bucket/t", {"aws_region": "us-east-1"}, [], r"scheme 'foo://' is not supported", None
    if kind == "missing-bucket":
        server = request.getfixturevalue("s3_server")
        uri = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/t"
        return uri, server.options(), [SECRET_KEY], r"bucket does not exist", server
    if kind == "wrong-secret":
        server = request.getfixturevalue("auth_server")
        options = server.options(aws_secret_access_key=WRONG_SECRET)
        secrets = [WRONG_SECRET, server.secret_key]
        return server.new_table_uri("denied"), options, secrets, r"refused: 403.*credentials", server
    if kind == "wrong-session-token":
        server = request.getfixturevalue("auth_server")
        options = server.options(aws_session_token=SESSION_TOKEN)
        secrets = [SESSION_TOKEN, server.secret_key]
        return server.new_table_uri("denied"), options, secrets, r"refused: 40[03].*credentials", server
    server = request.getfixturevalue("s3_server")
    uri = server.new_table_uri("not-hudi")
    prefix = uri.split("/", 3)[3]
    for key in ("part-00000.parquet", "_SUCCESS", "logs/app.log"):
        server.client().put_object(Bucket=server.bucket, Key=f"{prefix}/{key}", Body=b"not a hudi table")
    return uri, server.options(), [SECRET_KEY], r"not a Hudi table|hoodie\.properties file is missing", server


def check_refusal(text, uri, cause, secrets):
    assert uri in text, text
    assert re.search(cause, text), f"cause {cause!r} not in: {text}"
    for secret in secrets:
        assert secret not in text, f"a secret value in: {text}"


def test_every_entry_point_refuses_a_bad_location_before_writing_and_without_secrets(
    spark, bad_location, caplog, capfd
):
    uri, options, secrets, cause, server = bad_location
    caplog.set_level(logging.DEBUG)
    before = server_state(server, uri) if server is not None else None
    watched = (os.getcwd(), tempfile.gettempdir())
    locals_before = local_entries(*watched)

    errors = []
    try:
        sink = HoodieStreamSink(uri, OPTIONS, storage_options=options)
    except HoodieError as exc:
        errors.append(str(exc))
    else:  # the location is reached by the first micro-batch
        assert "secret" not in repr(sink) and all(s not in repr(sink) for s in secrets)
        with pytest.raises(HoodieError) as err:
            sink(events_df(spark, BATCH), 0)
        errors.append(str(err.value))
    with pytest.raises(HoodieError) as err:
        HoodieTable(uri, storage_options=options).read()
    errors.append(str(err.value))
    with pytest.raises(HoodieError) as err:
        list(compact_table(uri, options={"hoodie.write.lock.wait_time_ms": "0"}, storage_options=options))
    errors.append(str(err.value))
    with pytest.raises(HoodieError) as err:
        clean_table(uri, storage_options=options)
    errors.append(str(err.value))
    for error in errors:
        check_refusal(error, uri, cause, secrets)

    storage_args = [f"--storage-option={k}={v}" for k, v in options.items()]
    capfd.readouterr()
    for argv in (["summary", uri], ["compact", "--path", uri], ["clean", "--path", uri]):
        assert main(argv + storage_args) == 2, argv
        out, err = capfd.readouterr()
        assert out == "" and err.startswith("error: "), (argv, out, err)
        check_refusal(err, uri, cause, secrets)

    if server is not None:
        assert server_state(server, uri) == before, "something was written"
    assert local_entries(*watched) == locals_before or not [
        name
        for d in watched
        for name in set(local_entries(d)[d]) - set(locals_before[d])
        if any(part in name for part in ("foo", "bucket", "s3:", "no-such"))
    ]
    assert os.listdir(os.getcwd()) == []
    out, err = capfd.readouterr()
    for text in (caplog.text, out, err):
        for secret in secrets:
            assert secret not in text


def test_the_command_line_exits_2_with_the_refusal_on_stderr(auth_server):
    """The real command: refused credentials, exit code 2, the message on stderr, no secret anywhere."""
    uri = auth_server.new_table_uri("cli")
    options = auth_server.options(aws_secret_access_key=WRONG_SECRET)
    args = [f"--storage-option={k}={v}" for k, v in options.items()]
    done = subprocess.run(
        [sys.executable, "-m", "hoodie_stream", "summary", uri, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    check_refusal(done.stderr, uri, r"refused: 40[13]", [WRONG_SECRET, auth_server.secret_key])


def test_file_uris_work_as_plain_paths(spark, tmp_path):
    """A sink and HoodieTable given `file://` URIs write and read the table a plain path names."""
    base = tmp_path / "table"
    uri = f"file://{base}"
    sink = HoodieStreamSink(uri, OPTIONS)
    sink(events_df(spark, BATCH), 0)
    model = TableModel()
    model.apply_batch(BATCH)
    assert table_rows(HoodieTable(uri).read()) == model.rows()
    assert table_rows(HoodieTable(str(base)).read()) == model.rows()
    assert table_rows(rs_read(uri)) == model.rows()
    assert (base / ".hoodie" / "hoodie.properties").is_file()
    assert not (tmp_path / "file:").exists()
