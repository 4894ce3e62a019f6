"""The .hoodie_partition_metadata file of a partition directory."""

import os
import uuid

from . import java_properties

FILE_NAME = ".hoodie_partition_metadata"


def partition_depth(partition):
    """Number of path segments of a relative partition path (0 for the table root)."""
    return len([p for p in partition.split("/") if p])


def partition_dir(base, partition):
    return os.path.join(str(base), partition) if partition else str(base)


def write_partition_metadata(base, partition, commit_time):
    """Write the file once (first instant wins), via a temp name + rename. Returns True when written."""
    directory = partition_dir(base, partition)
    path = os.path.join(directory, FILE_NAME)
    if os.path.exists(path):
        return False
    os.makedirs(directory, exist_ok=True)
    props = {"commitTime": commit_time, "partitionDepth": str(partition_depth(partition))}
    text = java_properties.dumps(props, "partition metadata")
    tmp = os.path.join(directory, f"{FILE_NAME}_{uuid.uuid4().hex}")
    with open(tmp, "wb") as f:
        f.write(text.encode("latin-1"))
    try:
        os.link(tmp, path)
        written = True
    except FileExistsError:
        written = False
    except OSError:
        os.replace(tmp, path)
        written = True
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return written

def read_partition_metadata(base, partition):
    """The properties of a partition's metadata file ({} when absent)."""
    path = os.path.join(partition_dir(base, partition), FILE_NAME)
    if not os.path.exists(path):
        return {}
    return java_properties.load(path)
