"""Avro schemas by id: given (`schemas={id: schema}`) or fetched from a Confluent-compatible schema registry
(`GET <url>/schemas/ids/<id>`), each fetched once per process. Credentials in the URL (`https://user:secret@host`)
are sent as HTTP basic authentication and never appear in an error or a log line."""

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

from ..errors import HoodieConfigError, HoodieFormatError
from . import avro_envelope

TIMEOUT_SECONDS = 30


def redacted(url):
    """The URL without the credentials it may carry."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path, "", ""))


class SchemaRegistry:
    """Avro schemas by id (picklable: the cache travels with it)."""

    def __init__(self, url=None, schemas=None):
        if url is not None and urllib.parse.urlsplit(str(url)).scheme not in ("http", "https"):
            raise HoodieConfigError(f"schema_registry_url must be an http(s) URL, got {redacted(str(url))!r}")
        self.url = None if url is None else str(url).rstrip("/")
        self.cache = {}
        for key, schema in (schemas or {}).items():
            try:
                self.cache[int(key)] = avro_envelope.parse(schema)
            except (TypeError, ValueError):
                raise HoodieConfigError(f"schemas: Avro schemas are given by their integer id, got {key!r}") from None
            except HoodieFormatError as e:
                raise HoodieConfigError(f"schemas[{key!r}]: {e}") from None

    def __repr__(self):
        return f"SchemaRegistry({None if self.url is None else redacted(self.url)!r}, ids={sorted(self.cache)})"

    def get(self, schema_id, where):
        """The Avro schema of an id; an error naming `where` (topic, partition, offset) when no one knows it."""
        if schema_id in self.cache:
            return self.cache[schema_id]
        if self.url is None:
            raise HoodieFormatError(
                f"{where}: Avro schema id {schema_id} is not among the schemas given ({sorted(self.cache)}) and no "
                f"schema_registry_url is set"
            )
        self.cache[schema_id] = self._fetch(schema_id, where)
        return self.cache[schema_id]

    def _fetch(self, schema_id, where):
        parts = urllib.parse.urlsplit(self.url)
        plain = redacted(self.url)
        request = urllib.request.Request(f"{plain}/schemas/ids/{schema_id}", headers={"Accept": "application/json"})
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            secret = urllib.parse.unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                body = json.loads(response.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise HoodieFormatError(
                    f"{where}: Avro schema id {schema_id} is not known to the schema registry at {plain}"
                ) from None
            raise HoodieFormatError(
                f"{where}: the schema registry at {plain} answered {e.code} for schema id {schema_id}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise HoodieFormatError(
                f"{where}: the schema registry at {plain} could not give schema id {schema_id}: {reason}"
            ) from None
        if not isinstance(body, dict) or "schema" not in body:
            raise HoodieFormatError(f"{where}: the schema registry at {plain} gave no schema for id {schema_id}")
        return avro_envelope.parse(body["schema"])
