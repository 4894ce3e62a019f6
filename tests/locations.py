"""Table locations for the tests that run the same on local disk and on the S3 test server (tests/s3_server.py).

A `Location` is a table's URI with its storage options, and what the tests do with a table there: build the sink
and the reader with those options, read it with hudi-rs from the same endpoint, and look at, copy or damage its
files through the project's storage layer (which the tests of the storage layer check on their own). The `location`
fixture (tests/conftest.py) gives a fresh one per test, once on local disk (`[local]`) and once on the S3 server
(`[s3]`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hoodie_stream import HoodieStreamSink, HoodieTable
from hoodie_stream.format.file_group.file_names import parse_base_file_name, parse_log_file_name
from hoodie_stream.storage import Storage, storage_for
from oracle import rs_read


@dataclass
class Location:
    uri: str
    options: dict[str, str] = field(default_factory=dict)  # storage options ({} on local disk)
    kind: str = "local"  # "local" or "s3"
    _storage: Storage | None = field(default=None, repr=False)

    @property
    def storage_options(self) -> dict[str, str] | None:
        return self.options or None

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            self._storage = storage_for(self.uri, self.storage_options)
        return self._storage

    def sink(self, options, **kwargs) -> HoodieStreamSink:
        return HoodieStreamSink(self.uri, options, storage_options=self.storage_options, **kwargs)

    def table(self) -> HoodieTable:
        return HoodieTable(self.uri, storage_options=self.storage_options)

    def rs_read(self, *args, **kwargs):
        """hudi-rs's read of the table (oracle.rs_read) from the same location, with the same options."""
        return rs_read(self.uri, *args, storage_options=self.options, **kwargs)

    # -- files ---------------------------------------------------------------------------------------------
    def data_files(self) -> set[str]:
        """Relative paths of the base and log files under the table root (outside .hoodie)."""
        return {
            info.path
            for info in self.storage.list("", recursive=True)
            if not info.path.startswith(".hoodie/")
            and (parse_log_file_name(info.name) is not None or parse_base_file_name(info.name) is not None)
        }

    def names(self, directory: str) -> list[str]:
        """Names of the objects directly in `directory` (relative to the table root)."""
        return [info.name for info in self.storage.list(directory)]

    def exists(self, path: str) -> bool:
        return self.storage.exists(path)

    def read(self, path: str) -> bytes:
        return self.storage.read(path)

    def write(self, path: str, data: bytes) -> None:
        self.storage.write(path, data)

    def remove(self, path: str) -> None:
        assert self.storage.delete(path), f"{self.uri}: nothing to delete at {path}"

    def copy_to(self, dest: Location) -> Location:
        """Copy every object of this table to `dest` (an empty location of the same kind); returns `dest`."""
        for info in self.storage.list("", recursive=True):
            dest.storage.write(info.path, self.storage.read(info.path))
        return dest
