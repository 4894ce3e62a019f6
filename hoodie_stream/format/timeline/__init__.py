"""The timeline: instants, the active timeline under `.hoodie/`, the archived timeline, and commit metadata."""
