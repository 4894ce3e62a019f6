"""S3-compatible servers on loopback for the tests and benchmarks (moto), and their pytest fixtures.

- `S3Server`: `python -m moto.server` in a process of its own on a free port (moto's choice, read from its output). `.options()` are the storage options
  of a table on it, taken as they are by hoodie-stream and by hudi-rs (`HudiTableBuilder.with_storage_options`), with
  short retries so that a store cut off fails a request within seconds. `S3Server(auth=True)` checks credentials
  (moto's IAM simulation): a wrong secret gets 403 SignatureDoesNotMatch, an unknown key 403 InvalidAccessKeyId.
- `CountingS3Server`: the same moto application served in this process (a thread), counting the requests it
  answers by kind (LIST, GET, HEAD, PUT, POST, DELETE). `.stop()` cuts the store off (the listening socket and every
  open connection are closed) and `.start()` brings it back on the same port with every object kept (moto's state
  lives in the process, not in the server).

Both create a session bucket (`.bucket`) and hand out fresh table locations in it (`.new_table_uri(name)`). Requests
are path-style (`http://127.0.0.1:PORT/bucket/key`), which is what the clients do with a custom endpoint.

The module imports neither pytest nor moto at import time: benchmarks put tests/ on sys.path and import it. The
fixtures (`s3_server`, `s3_table`) are defined at the bottom when pytest is running; tests/conftest.py imports them.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from urllib.parse import parse_qs

HOST = "127.0.0.1"
ACCESS_KEY = "hoodie-test-key"
SECRET_KEY = "hoodie-test-secret-value"
REGION = "us-east-1"
BUCKET = "hoodie-tests"
# client settings of the test options: a store cut off fails a request after 2 retries, within seconds
FAST_FAILURE = {"max_retries": "2", "retry_timeout": "10", "connect_timeout": "2s", "timeout": "30s"}
KINDS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")
# query parameters of a bucket-level GET that lists objects (ListObjects v1 and v2)
_LIST_PARAMS = frozenset({"list-type", "prefix", "delimiter", "marker", "continuation-token", "start-after"})
# werkzeug's line once the server listens
_RUNNING_ON = re.compile(r"Running on http://[^\s:]+:(\d+)")


def _answers(url: str, timeout: float = 1.0) -> bool:
    """Whether an HTTP server answers at url (any status)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


class _MotoEndpoint:
    """What both servers share: the endpoint, the storage options, buckets and table locations."""

    host = HOST
    port: int
    bucket = BUCKET

    def __init__(self) -> None:
        self.access_key = ACCESS_KEY
        self.secret_key = SECRET_KEY
        self._s3_client = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    def options(self, **overrides: object) -> dict[str, str]:
        """The storage options of a table on this server (string values: hudi-rs takes them as they are). A keyword
        replaces an option (`aws_endpoint_url=proxy.endpoint`, `aws_secret_access_key="wrong"`); None removes it."""
        options = {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "aws_region": REGION,
            "aws_endpoint_url": self.endpoint,
            "aws_allow_http": "true",
            **FAST_FAILURE,
        }
        for key, value in overrides.items():
            if value is None:
                options.pop(key, None)
            else:
                options[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
        return options

    def client(self, service: str = "s3"):
        """A boto3 client of this server, with its credentials."""
        import boto3

        if service == "s3" and self._s3_client is not None:
            return self._s3_client
        client = boto3.client(
            service,
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=REGION,
        )
        if service == "s3":
            self._s3_client = client
        return client

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def new_table_uri(self, name: str = "table") -> str:
        """A location nothing has been written to: `s3://<session bucket>/<name>-<random>`."""
        return f"s3://{self.bucket}/{name}-{uuid.uuid4().hex[:12]}"

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def stop(self) -> None:
        raise NotImplementedError


class S3Server(_MotoEndpoint):
    """`python -m moto.server` (this interpreter) on a free loopback port, started by the constructor, with the
    session bucket created. `auth=True`: credentials are checked; the options then hold an access key moto created
    for an IAM user allowed everything (moto makes up its ids: `.access_key` and `.secret_key`)."""

    def __init__(self, auth: bool = False, port: int | None = None, startup_timeout: float = 30.0) -> None:
        super().__init__()
        self.auth = auth
        self.process: subprocess.Popen | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=40)
        # port 0: moto binds a free port and names it (werkzeug's startup line); a port picked here and handed
        # over could be taken meanwhile by another server, whose answers would then be taken for this one's
        self.port = port or 0
        if not self._start(startup_timeout):
            raise RuntimeError(
                f"moto server did not start on {self.host}:{self.port or 'a free port'} "
                f"(exit code {self.process.returncode if self.process else None}):\n" + "".join(self._stderr)
            )
        atexit.register(self.stop)
        if auth:
            self._enable_auth()
        self.create_bucket(self.bucket)

    def _start(self, timeout: float) -> bool:
        env = dict(os.environ)
        env.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)  # no checks while the server is set up
        env.pop("MOTO_PORT", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        self._bound = threading.Event()
        threading.Thread(target=self._drain, args=(self.process.stderr,), daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            # the port this process bound (announced once it listens), so the answer is its own
            if self._bound.is_set() and _answers(self.endpoint + "/moto-api/data.json"):
                return True
            time.sleep(0.05)
        self._kill()
        return False

    def _drain(self, pipe) -> None:
        """Keep the last lines the server wrote (its request log, or why it did not start); learn its port from
        werkzeug's startup line ` * Running on http://HOST:PORT`."""
        with contextlib.suppress(ValueError, OSError):
            for line in pipe:
                self._stderr.append(line)
                if not self._bound.is_set():
                    found = _RUNNING_ON.search(line)
                    if found:
                        self.port = int(found.group(1))
                        self._bound.set()

    def _enable_auth(self) -> None:
        iam = self.client("iam")
        iam.create_user(UserName="hoodie-test")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="hoodie-test", PolicyName="everything", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="hoodie-test")["AccessKey"]
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]
        self._s3_client = None
        # from now on every request is authenticated and its signature checked
        request = urllib.request.Request(
            self.endpoint + "/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()

    def _kill(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def stop(self) -> None:
        self._kill()
        atexit.unregister(self.stop)


class CountingS3Server(_MotoEndpoint):
    """moto's S3 served in this process (a thread) on a loopback port, counting requests by kind:

    - LIST: a GET on a bucket listing its objects (ListObjects v1/v2: `list-type`, `prefix`, `delimiter`, ...);
    - GET (objects, ranges), HEAD;
    - PUT: objects, multipart parts, CopyObject (and bucket creation);
    - POST: multipart create and complete, DeleteObjects;
    - DELETE: objects, multipart aborts.

    Conditional writes (If-Match / If-None-Match) are served one at a time, as S3 applies them atomically (moto checks
    the condition, then writes). `.stop()` / `.start()` cut the store off and bring it back on the same port with
    its objects; a server object per process is enough (moto's backend is per process: two in one process share
    their buckets and objects)."""

    def __init__(self, port: int | None = None) -> None:
        super().__init__()
        self.port = port or 0  # the first start binds a free port and keeps it for the restarts
        self._counts: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._conditional = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None
        self._app = None
        self.start()
        from botocore.exceptions import ClientError

        try:
            self.create_bucket(self.bucket)
        except ClientError as err:  # a second server in this process finds the bucket there
            if err.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        self.reset()

    # -- counting --------------------------------------------------------------------------------------------
    @staticmethod
    def kind(environ) -> str | None:
        """The kind of a request (None for moto's own API, which is not counted)."""
        method = environ.get("REQUEST_METHOD", "")
        path = environ.get("PATH_INFO", "")
        if path.startswith("/moto-api"):
            return None
        query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
        bucket, _, key = path.lstrip("/").partition("/")
        if method == "GET" and bucket and not key and (not query or _LIST_PARAMS & query.keys()):
            return "LIST"
        return method if method in KINDS else "OTHER"

    def _counting(self, app):
        def counted(environ, start_response):
            kind = self.kind(environ)
            if kind is not None:
                with self._lock:
                    self._counts[kind] += 1
            if environ.get("HTTP_IF_MATCH") or environ.get("HTTP_IF_NONE_MATCH"):
                with self._conditional:
                    return app(environ, start_response)
            return app(environ, start_response)

        return counted

    def counts(self) -> dict[str, int]:
        """{kind: requests} since the start or the last reset (every kind of KINDS, and OTHER when there were
        others)."""
        with self._lock:
            out = {kind: 0 for kind in KINDS}
            out.update(self._counts)
            return out

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()

    # -- serving ---------------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Serve on `.port` (again, after a stop: the objects are still there)."""
        if self._server is not None:
            return
        if self._app is None:
            from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

            self._app = self._counting(DomainDispatcherApplication(create_backend_app))
        server_class, handler_class = _server_classes()
        deadline = time.monotonic() + 10
        while True:
            try:
                server = server_class(self.host, self.port, self._app, handler=handler_class)
                break
            except OSError:  # the port of a stopped server, not yet free
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        atexit.register(self.stop)

    def stop(self) -> None:
        """Stop serving: the listening socket is closed (connections are refused) and every open connection is
        closed, so clients holding pooled connections fail too."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(10)
        atexit.unregister(self.stop)


_SERVER_CLASSES = None


def _server_classes():
    """(server class, request handler class): werkzeug's threaded server keeping its open connections, so that
    `stop` can close them, and moto's request handler without the request log."""
    global _SERVER_CLASSES
    if _SERVER_CLASSES is None:
        from moto.moto_server.werkzeug_app import MotoRequestHandler
        from werkzeug.serving import ThreadedWSGIServer

        class QuietHandler(MotoRequestHandler):
            def log_request(self, *args, **kwargs):
                pass

        class Server(ThreadedWSGIServer):
            def __init__(self, *args, **kwargs):
                self.open_connections: set[socket.socket] = set()
                self.connections_lock = threading.Lock()
                super().__init__(*args, **kwargs)

            def process_request(self, request, client_address):
                with self.connections_lock:
                    self.open_connections.add(request)
                super().process_request(request, client_address)

            def shutdown_request(self, request):
                with self.connections_lock:
                    self.open_connections.discard(request)
                super().shutdown_request(request)

            def close_connections(self):
                with self.connections_lock:
                    connections, self.open_connections = list(self.open_connections), set()
                for conn in connections:
                    with contextlib.suppress(OSError):
                        conn.shutdown(socket.SHUT_RDWR)
                    with contextlib.suppress(OSError):
                        conn.close()

        _SERVER_CLASSES = (Server, QuietHandler)
    return _SERVER_CLASSES


# -- pytest fixtures (defined when pytest runs; tests/conftest.py imports them) -----------------------------------
if "pytest" in sys.modules:
    import pytest

    @pytest.fixture(scope="session")
    def s3_server():
        """The session's S3Server (moto in a process of its own), started by the first test that asks for it."""
        server = S3Server()
        yield server
        server.stop()

    @pytest.fixture
    def s3_table(s3_server):
        """(uri, storage options) of a fresh table location on the session's S3Server."""
        return s3_server.new_table_uri("table"), s3_server.options()
