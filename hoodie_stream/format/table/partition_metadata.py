"""The .hoodie_partition_metadata file of a partition directory."""

from ...errors import HoodieObjectExistsError
from ...storage import join, storage_for
from ..util import java_properties

FILE_NAME = ".hoodie_partition_metadata"


def partition_depth(partition):
    """Number of path segments of a relative partition path (0 for the table root)."""
    return len([p for p in partition.split("/") if p])


def write_partition_metadata(storage, partition, commit_time):
    """Write the file once (first instant wins: create-if-absent). Returns True when written."""
    storage = storage_for(storage)
    path = join(partition, FILE_NAME)
    if storage.exists(path):
        return False
    props = {"commitTime": commit_time, "partitionDepth": str(partition_depth(partition))}
    try:
        storage.create(path, java_properties.dumps(props, "partition metadata").encode("latin-1"))
    except HoodieObjectExistsError:
        return False
    return True


def read_partition_metadata(storage, partition):
    """The properties of a partition's metadata file ({} when absent)."""
    storage = storage_for(storage)
    path = join(partition, FILE_NAME)
    if not storage.exists(path):
        return {}
    return java_properties.load_bytes(storage.read(path))
