"""Storage options: credentials, endpoints and client settings of an object store, and keeping them secret.

Key names are the ones hudi-rs and delta-rs take (both build on the Rust `object_store` crate, as the `obstore`
client used here does): `aws_access_key_id`, `aws_secret_access_key`, `aws_session_token`, `aws_region`,
`aws_endpoint_url`, `aws_allow_http`, `google_service_account`, `google_application_credentials`,
`azure_storage_account_name`, `azure_storage_account_key`, ... plus the client keys (`allow_http`, `timeout`,
`connect_timeout`, ...) and the retry keys `max_retries` and `retry_timeout` (seconds).

`resolve` merges three sources, the first that names a key winning: the options given, the standard environment
variables (`AWS_*` including `AWS_ENDPOINT_URL`, `GOOGLE_APPLICATION_CREDENTIALS`, `AZURE_*`), then the Spark
session's `spark.hadoop.fs.s3a.*` settings (given by the caller as a dict: this module knows nothing of Spark).
The result is resolved once, on the driver, and travels with the storage to the executors, whose environment may
differ.

Secrets never leave the process in text: `is_secret` names the keys whose values are secret, `redact` removes
their values from any text (an error message from the client, say), and a storage's repr shows only its URI.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping

from ..errors import HoodieConfigError

# the store kind of each URI scheme
SCHEMES = {
    "s3": "s3",
    "s3a": "s3",
    "gs": "gcs",
    "abfs": "azure",
    "abfss": "azure",
    "az": "azure",
    "hdfs": "hdfs",
}
_PREFIXES = {"s3": "aws_", "gcs": "google_", "azure": "azure_", "hdfs": "hdfs_"}

# keys every store takes (the HTTP client's and the retry settings)
CLIENT_KEYS = frozenset(
    {
        "allow_http",
        "allow_invalid_certificates",
        "connect_timeout",
        "default_content_type",
        "http2_keep_alive_interval",
        "http2_keep_alive_timeout",
        "http2_keep_alive_while_idle",
        "randomize_addresses",
        "root_certificate",
        "timeout",
        "read_timeout",
        "pool_idle_timeout",
        "pool_max_idle_per_host",
        "proxy_url",
        "proxy_ca_certificate",
        "proxy_excludes",
        "user_agent",
        "http1_only",
        "http2_only",
    }
)
RETRY_KEYS = frozenset({"max_retries", "retry_timeout"})

_SECRET_WORDS = re.compile(r"secret|password|token|credential|sas|signature|access_key|account_key|private|key$")

_ENV: dict[str, dict[str, tuple[str, ...]]] = {
    "s3": {
        "aws_access_key_id": ("AWS_ACCESS_KEY_ID",),
        "aws_secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
        "aws_session_token": ("AWS_SESSION_TOKEN",),
        "aws_region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
        "aws_endpoint_url": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
        "aws_allow_http": ("AWS_ALLOW_HTTP",),
    },
    "gcs": {
        "google_application_credentials": ("GOOGLE_APPLICATION_CREDENTIALS",),
        "google_service_account": ("GOOGLE_SERVICE_ACCOUNT",),
        "google_service_account_key": ("GOOGLE_SERVICE_ACCOUNT_KEY",),
    },
    "azure": {
        "azure_storage_account_name": ("AZURE_STORAGE_ACCOUNT_NAME",),
        "azure_storage_account_key": ("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY"),
        "azure_storage_sas_key": ("AZURE_STORAGE_SAS_KEY",),
        "azure_client_id": ("AZURE_CLIENT_ID",),
        "azure_client_secret": ("AZURE_CLIENT_SECRET",),
        "azure_tenant_id": ("AZURE_TENANT_ID",),
        "azure_storage_use_emulator": ("AZURE_STORAGE_USE_EMULATOR",),
        "azure_endpoint": ("AZURE_STORAGE_ENDPOINT",),
    },
}

# spark.hadoop.fs.s3a.<name> -> storage option
_S3A = {
    "access.key": "aws_access_key_id",
    "secret.key": "aws_secret_access_key",
    "session.token": "aws_session_token",
    "endpoint": "aws_endpoint_url",
    "endpoint.region": "aws_region",
    "path.style.access": "aws_virtual_hosted_style_request",
    "connection.ssl.enabled": "aws_allow_http",
}
S3A_PREFIX = "spark.hadoop.fs.s3a."


def store_kind(uri: str) -> str:
    """'local', 's3', 'gcs', 'azure' or 'hdfs' for a table location; HoodieConfigError for other schemes."""
    if "://" not in uri:
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*:/", uri) and not uri.startswith("file:"):
            raise HoodieConfigError(f"{uri}: not a storage URI (expected scheme://...) and not a local path")
        return "local"
    scheme = uri.split("://", 1)[0].lower()
    if scheme == "file":
        return "local"
    if scheme not in SCHEMES:
        known = ", ".join(sorted(f"{s}://" for s in SCHEMES)) + ", file:// and local paths"
        raise HoodieConfigError(f"{uri}: storage scheme {scheme + '://'!r} is not supported (supported: {known})")
    return SCHEMES[scheme]


def is_secret(key: str) -> bool:
    """Whether a storage option's value is secret (credentials, keys, tokens, signatures)."""
    key = key.lower()
    if key in ("aws_region", "aws_endpoint_url", "aws_endpoint", "aws_allow_http") or key.endswith("_endpoint"):
        return False
    return bool(_SECRET_WORDS.search(key))


def s3a_settings(conf: Mapping[str, str]) -> dict[str, str]:
    """Storage options from Spark settings `spark.hadoop.fs.s3a.*` (Hadoop's S3A names)."""
    out: dict[str, str] = {}
    for name, option in _S3A.items():
        value = conf.get(S3A_PREFIX + name)
        if value is None or value == "":
            continue
        if name == "path.style.access":  # path style is the opposite of virtual hosted style
            value = "false" if str(value).lower() == "true" else "true"
        if name == "endpoint" and "://" not in value:
            secure = str(conf.get(S3A_PREFIX + "connection.ssl.enabled", "true")).lower() != "false"
            value = ("https://" if secure else "http://") + value
        if name == "connection.ssl.enabled":
            value = "false" if str(value).lower() == "true" else "true"
        out[option] = str(value)
    return out


def _normalized(options: Mapping[str, object] | None, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (options or {}).items():
        if not isinstance(key, str) or not key:
            raise HoodieConfigError(f"{where}: storage option names must be non-empty strings, got {key!r}")
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[key.lower()] = str(value)
    return out


def resolve(
    uri: str,
    storage_options: Mapping[str, object] | None = None,
    fallback: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The storage options of a location: `storage_options`, then the environment, then `fallback` (the Spark
    session's settings as storage options). Keys are lower-cased; values are strings."""
    kind = store_kind(uri)
    explicit = _normalized(storage_options, uri)
    if kind == "local":
        return explicit
    environ = os.environ if environ is None else environ
    merged = _normalized(fallback, uri)
    for option, names in _ENV.get(kind, {}).items():
        for name in names:
            if environ.get(name):
                merged[option] = environ[name]
                break
    merged.update(explicit)
    if kind == "s3" and "aws_endpoint" in merged:  # both names are accepted; one reaches the client
        merged.setdefault("aws_endpoint_url", merged.pop("aws_endpoint"))
    prefix = _PREFIXES[kind]
    for key in merged:
        if not (key.startswith(prefix) or key in CLIENT_KEYS or key in RETRY_KEYS):
            foreign = next((p for p in _PREFIXES.values() if key.startswith(p)), None)
            hint = f" (a {foreign.rstrip('_')} option; this location is {kind})" if foreign else ""
            raise HoodieConfigError(f"{uri}: unknown storage option {key!r}{hint}")
    return merged


def check_plain_http(uri: str, options: Mapping[str, str]) -> None:
    """Refuse an `http://` S3 endpoint without `aws_allow_http=true` (or the client key `allow_http`), naming the
    option (the caller names the location): the client would fail every request with a bare "builder error"."""
    endpoint = str(options.get("aws_endpoint_url") or options.get("aws_endpoint") or "").strip()
    if store_kind(uri) != "s3" or not endpoint.lower().startswith("http://"):
        return
    if any(str(options.get(k, "")).strip().lower() == "true" for k in ("aws_allow_http", "allow_http")):
        return
    host = urllib.parse.urlsplit(endpoint).netloc.rpartition("@")[2]  # no user info in messages
    raise HoodieConfigError(
        f"the endpoint http://{host} is plain HTTP, which the S3 client refuses unless storage option "
        "'aws_allow_http' is 'true' (or environment AWS_ALLOW_HTTP=true); set it, or use an https:// endpoint"
    )


def redact(text: str, options: Mapping[str, str] | None) -> str:
    """`text` with the value of every secret option replaced by `***` (and signed-URL query strings dropped)."""
    for key, value in (options or {}).items():
        if value and len(value) >= 4 and is_secret(key):
            text = text.replace(value, "***")
    return re.sub(r"(X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|sig|sv|se)=[^&\s\"']+", r"\1=***", text)


def shown(options: Mapping[str, str] | None) -> dict[str, str]:
    """Options as they may be shown: secret values replaced by `***`."""
    return {k: ("***" if is_secret(k) else v) for k, v in (options or {}).items()}


def secret_values(options: Mapping[str, str] | None) -> Iterable[str]:
    return [v for k, v in (options or {}).items() if v and is_secret(k)]
