"""The table's own files outside the timeline: `hoodie.properties` (table config), partition metadata, the metadata table's switch, the writer lease and the write markers."""
