"""Streaming batch id <-> instant: the `_hudi_streaming_sink_checkpoint` entry of commit extra metadata.

Its value is a JSON object mapping writer identifiers to the last committed batch id (a string), as Hudi's Spark
streaming sink writes it. The sink's identifier joins `hoodie.datasource.write.streaming.checkpoint.identifier`
with the streaming query id, so a query started from a new checkpoint location (a new query id) never mistakes
another query's batch ids for its own. A batch write (`hoodie_stream.write`) has no batch id: its commit carries the
map of the commit before it unchanged, so every query finds its last batch id in the newest commit.
"""

import json

CHECKPOINT_KEY = "_hudi_streaming_sink_checkpoint"


def writer_identifier(base_identifier, query_id):
    return f"{base_identifier}-{query_id}" if query_id else base_identifier


def _data_commits(timeline):
    return [i for i in timeline.commits_timeline()]


def latest_checkpoints(timeline):
    """The checkpoint map of the newest completed commit that has one ({} when none)."""
    for inst in reversed(_data_commits(timeline)):
        extra = timeline.read_commit_metadata(inst.timestamp).extra_metadata
        if CHECKPOINT_KEY in extra:
            try:
                return json.loads(extra[CHECKPOINT_KEY])
            except ValueError:
                continue
    return {}


def last_batch_id(timeline, identifier):
    """The last batch id committed by `identifier`: newest completed commit whose map names it, else None."""
    for inst in reversed(_data_commits(timeline)):
        extra = timeline.read_commit_metadata(inst.timestamp).extra_metadata
        if CHECKPOINT_KEY not in extra:
            continue
        try:
            entries = json.loads(extra[CHECKPOINT_KEY])
        except ValueError:
            continue
        if identifier in entries:
            return int(entries[identifier])
    return None


def checkpoint_metadata(timeline, identifier, batch_id):
    """Extra metadata entry recording `batch_id` for `identifier`, keeping other writers' entries. With no batch id
    (a batch write) the newest map is carried on as it is ({} when no commit has one)."""
    entries = dict(latest_checkpoints(timeline))
    if batch_id is None:
        return {CHECKPOINT_KEY: json.dumps(entries, separators=(",", ":"))} if entries else {}
    entries[identifier] = str(batch_id)
    return {CHECKPOINT_KEY: json.dumps(entries, separators=(",", ":"))}
