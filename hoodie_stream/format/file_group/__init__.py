"""File groups and slices: file names, and the file-system view of a table's partitions as of an instant."""
