"""Records and their keys: key generators, partition paths, and the merge of a record's versions (merge modes, ordering values, payload classes)."""
