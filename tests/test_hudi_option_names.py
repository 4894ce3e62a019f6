"""Hudi's own option names are accepted beside Hudi Flink's, as Hudi's Flink writer accepts them (FlinkOptions'
fallback keys and the `hoodie.*` write-config keys): a Spark user's `hoodie.cleaner.commits.retained` or
`hoodie.compact.inline.max.delta.commits` configures the sink; the Flink name wins when both are given."""

import logging
from dataclasses import dataclass

import pytest

from hoodie_stream.errors import HoodieConfigError
from hoodie_stream.options import (
    Alias,
    inverted,
    known_keys,
    option,
    options_of,
    parse_compaction_options,
    parse_options,
    parse_table_service_options,
)

KEY = {"hoodie.datasource.write.recordkey.field": "id"}


@pytest.mark.parametrize(
    ("hudi_key", "text", "field", "value"),
    [
        ("hoodie.cleaner.commits.retained", "7", "retain_commits", 7),  # Hudi 0.x
        ("hoodie.clean.commits.retained", "8", "retain_commits", 8),  # Hudi 1.x
        ("hoodie.cleaner.fileversions.retained", "2", "retain_file_versions", 2),
        ("hoodie.clean.fileversions.retained", "3", "retain_file_versions", 3),
        ("hoodie.cleaner.hours.retained", "6", "retain_hours", 6),
        ("hoodie.clean.hours.retained", "5", "retain_hours", 5),
        ("hoodie.cleaner.policy", "keep_latest_file_versions", "clean_policy", "KEEP_LATEST_FILE_VERSIONS"),
        ("hoodie.clean.policy", "KEEP_LATEST_BY_HOURS", "clean_policy", "KEEP_LATEST_BY_HOURS"),
        ("hoodie.clean.async", "false", "clean_async", False),
        ("hoodie.clean.async.enabled", "false", "clean_async", False),
        ("hoodie.compact.inline.max.delta.commits", "3", "delta_commits", 3),
        ("hoodie.compact.inline.max.delta.seconds", "60", "delta_seconds", 60),
        ("hoodie.compact.inline.trigger.strategy", "NUM_OR_TIME", "trigger", "num_or_time"),
        ("hoodie.compaction.target.io", "512", "target_io_mb", 512),
        ("hoodie.memory.compaction.max.size", str(64 * 1024 * 1024), "max_memory_bytes", 64 * 1024 * 1024),
        ("hoodie.datasource.compaction.async.enable", "false", "async_run", False),
        ("hoodie.compact.inline", "true", "async_run", False),  # inline compaction: not async
        ("hoodie.compact.inline", "false", "async_run", True),
    ],
)
def test_a_hudi_key_sets_the_option_in_every_entry_point(hudi_key, text, field, value):
    assert getattr(parse_options("/t/orders", {**KEY, hudi_key: text}).compaction, field) == value
    assert getattr(parse_compaction_options({hudi_key: text}), field) == value
    assert getattr(parse_table_service_options({hudi_key: text})[0], field) == value  # offline compact / clean
    assert hudi_key in known_keys()


def test_the_table_type_has_hudi_table_config_name():
    assert parse_options("/t", {**KEY, "hoodie.table.type": "merge_on_read"}).table_type == "MERGE_ON_READ"
    with pytest.raises(HoodieConfigError, match="'hoodie.table.type' must be MERGE_ON_READ"):
        parse_options("/t", {**KEY, "hoodie.table.type": "COPY_ON_WRITE"})


def test_flink_name_wins_and_a_conflict_is_logged(caplog):
    given = {**KEY, "clean.retain_commits": "12", "hoodie.cleaner.commits.retained": "4"}
    with caplog.at_level(logging.WARNING, logger="hoodie_stream.options"):
        assert parse_options("/t", given).compaction.retain_commits == 12
    (record,) = [r for r in caplog.records if "clean.retain_commits" in r.getMessage()]
    assert "'hoodie.cleaner.commits.retained'='4'" in record.getMessage()
    assert "'clean.retain_commits' is used" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hoodie_stream.options"):  # the same value: nothing to say
        assert parse_options("/t", {**KEY, "clean.retain_commits": "4", "hoodie.clean.commits.retained": "4.0"})
    assert not caplog.records
    # among aliases the Hudi 1.x name comes first
    both = {"hoodie.clean.commits.retained": "9", "hoodie.cleaner.commits.retained": "3"}
    assert parse_compaction_options(both).retain_commits == 9


def test_a_bad_value_under_a_hudi_key_names_that_key():
    with pytest.raises(HoodieConfigError, match="'hoodie.cleaner.commits.retained' must be a positive integer"):
        parse_options("/t", {**KEY, "hoodie.cleaner.commits.retained": "many"})
    with pytest.raises(HoodieConfigError, match="'hoodie.compact.inline' must be true or false"):
        parse_compaction_options({"hoodie.compact.inline": "sometimes"})


def test_unknown_keys_are_still_refused():
    with pytest.raises(HoodieConfigError, match="hoodie.cleaner.commits.retaind"):
        parse_options("/t", {**KEY, "hoodie.cleaner.commits.retaind": "3"})
    with pytest.raises(HoodieConfigError, match="hoodie.clean.comits.retained"):
        parse_compaction_options({"hoodie.clean.comits.retained": "3"})


def test_an_option_can_be_declared_with_aliases():
    """The mechanism another option (e.g. the archival's `hoodie.keep.min.commits`) declares its names with."""

    @dataclass(frozen=True)
    class Archival:
        min_commits: int = option("archive.min_commits", "40", int_parse, aliases=("hoodie.keep.min.commits",))
        automatic: bool = option("hoodie.archive.automatic", "true", bool_parse, aliases=(Alias("x.off", inverted),))

    spec = options_of(Archival)["min_commits"]
    assert spec.keys == ("archive.min_commits", "hoodie.keep.min.commits")
    assert spec.read({"hoodie.keep.min.commits": "20"}) == 20
    assert spec.read({}) == 40 == Archival().min_commits
    assert options_of(Archival)["automatic"].read({"x.off": "true"}) is False


def int_parse(key, raw):
    return int(raw)


def bool_parse(key, raw):
    return raw == "true"
