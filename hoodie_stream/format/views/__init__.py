"""Views of a table for people: commits and file slices as Arrow tables, the notebook's HTML view, the one-page summary."""
