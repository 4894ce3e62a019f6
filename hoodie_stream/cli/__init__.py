"""The command line's commands, modelled on hudi-cli; `__main__.py` only parses arguments, `commands.py` runs one.

summary (`format/views/summary.py`), timeline/commits/slices (`show.py`), stats (`stats.py`), validate (`validate.py`:
files and log blocks from `table_files.py` and `block_check.py`, pending compaction plans from
`compaction_check.py`, the index state from `index_check.py`, findings as `problems.py`), rollback
(`rollback.py`), compact/clean (`services.py`), upgrade (`upgrade.py`); text or JSON output (`output.py`); progress bars (`progress.py`).
"""
