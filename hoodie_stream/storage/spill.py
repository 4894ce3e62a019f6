"""Spill files: Arrow tables a task sets aside on its executor's local disk while it works through more than its
memory holds (Hudi spills the records past its memory the same way), in a directory of its own under the temporary
directory (`TMPDIR`), never in the table's storage. Written as Arrow IPC files, read back memory-mapped and deleted as
they are read; the directory goes when the spill is closed."""

from __future__ import annotations

import os
import tempfile

import pyarrow as pa
import pyarrow.ipc as ipc


class Spill:
    def __init__(self, prefix: str = "hoodie-spill-") -> None:
        self._directory = tempfile.TemporaryDirectory(prefix=prefix)

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._directory.cleanup()

    def writer(self, name: str, schema: pa.Schema) -> ipc.RecordBatchFileWriter:
        """A writer of the spill file `name` (close it before `take`)."""
        return ipc.new_file(os.path.join(self._directory.name, name), schema)

    def take(self, name: str) -> pa.Table:
        """The table of spill file `name`, memory-mapped; the file is deleted (the mapping stays valid)."""
        path = os.path.join(self._directory.name, name)
        with pa.memory_map(path) as source:
            table = ipc.open_file(source).read_all()
        os.remove(path)
        return table
