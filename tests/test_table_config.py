import os
import zlib

import pytest

from conftest import TABLE_ZIPS, v6_table_zips
from hoodie_stream.errors import HoodieFormatError, HoodieTableError
from hoodie_stream.format.table.config import TableConfig, checksum
from hoodie_stream.format.table.partition_metadata import read_partition_metadata, write_partition_metadata
from hoodie_stream.format.util import java_properties

V6 = [p.stem for p in v6_table_zips()]
V8 = sorted(p.stem for p in TABLE_ZIPS.glob("*-v8_*.zip"))


def _props_path(base):
    return os.path.join(base, ".hoodie", "hoodie.properties")


@pytest.mark.parametrize("name", V6 + V8)
def test_properties_round_trip(fixture_table, name):
    path = _props_path(fixture_table(name))
    props = java_properties.load_bytes(open(path, "rb").read())
    assert props["hoodie.table.name"]
    assert int(props["hoodie.table.checksum"]) == checksum(props)
    assert java_properties.loads(java_properties.dumps(props, "x")) == props
    if "hoodie.table.create.schema" in props:
        assert props["hoodie.table.create.schema"].startswith('{"type":"record"')


@pytest.mark.parametrize("name", V6)
def test_load_v6_fixtures(fixture_table, name):
    cfg = TableConfig.load(fixture_table(name))
    assert cfg.table_name in name
    assert cfg.record_key_fields
    assert cfg.table_type in ("MERGE_ON_READ", "COPY_ON_WRITE")
    assert cfg.partition_fields == (
        cfg.props.get("hoodie.table.partition.fields", "").split(",")
        if cfg.props.get("hoodie.table.partition.fields")
        else []
    )
    assert cfg.populate_meta_fields == ("no_metafields" not in name)
    cfg.check_writable()


@pytest.mark.parametrize("name", V8)
def test_v8_loads(fixture_table, name):
    cfg = TableConfig.load(fixture_table(name))
    assert cfg.version == 8 and cfg.props["hoodie.timeline.layout.version"] == "2"


def test_a_layout_that_does_not_go_with_the_version_is_refused(fixture_table):
    base = fixture_table(V8[0])
    path = base / ".hoodie" / "hoodie.properties"
    path.write_text(path.read_text().replace("hoodie.timeline.layout.version=2", "hoodie.timeline.layout.version=1"))
    with pytest.raises(HoodieTableError, match="timeline layout version 1 does not go with table version 8"):
        TableConfig.load(base)


def test_escaping_like_java():
    props = {"k:e=y #!": "a:b=c#d!e\\f g", "u": "\u00fc\u65e5\U0001f600", "lead": " x", "tab": "a\tb\nc"}
    text = java_properties.dumps(props, "comment")
    lines = text.splitlines()
    assert lines[0] == "#comment" and lines[1].startswith("#") and lines[1].endswith(" UTC " + lines[1][-4:])
    assert "k\\:e\\=y\\ \\#\\!=a\\:b\\=c\\#d\\!e\\\\f g" in lines
    assert "u=\\u00FC\\u65E5\\uD83D\\uDE00" in lines
    assert "lead=\\ x" in lines
    assert "tab=a\\tb\\nc" in lines
    assert text.isascii()
    assert java_properties.loads(text) == props


def test_java_loader_rules():
    text = "# c\n! c\n  a = 1\nb:2\nc 3\nd=\\\n   continued\ne=\\u0041\\:\\=\nf\n"
    assert java_properties.loads(text) == {"a": "1", "b": "2", "c": "3", "d": "continued", "e": "A:=", "f": ""}
    with pytest.raises(HoodieFormatError):
        java_properties.loads("a=\\u12G4")


def test_header_lines():
    text = java_properties.dumps({"a": "b"}, java_properties.store_comment())
    assert text.startswith("#Properties saved on ")
    assert (
        java_properties.java_date_string(
            __import__("datetime").datetime(2024, 4, 18, 22, 32, 13, tzinfo=__import__("datetime").timezone.utc)
        )
        == "Thu Apr 18 22:32:13 UTC 2024"
    )


def _create(base, **kw):
    args = dict(
        table_name="t1",
        record_key_fields=["id"],
        precombine_field="ts",
        partition_fields=["p"],
        keygen_class="org.apache.hudi.keygen.SimpleKeyGenerator",
        hive_style=False,
        url_encode=False,
        payload_class="org.apache.hudi.common.model.OverwriteWithLatestAvroPayload",
        schema_avro='{"type":"record","name":"t1_record","fields":[]}',
    )
    args.update(kw)
    return TableConfig.create(base, **args)


def test_create_and_load(tmp_path):
    cfg = _create(tmp_path)
    for d in (".aux/.bootstrap/.partitions", ".aux/.bootstrap/.fileids", ".schema", "archived", ".temp"):
        assert (tmp_path / ".hoodie" / d).is_dir()
    text = open(_props_path(tmp_path), encoding="latin-1").read()
    assert text.startswith("#Properties saved on ")
    assert 'hoodie.table.create.schema={"type"\\:"record"' in text
    loaded = TableConfig.load(tmp_path)
    assert loaded.props == cfg.props
    assert int(loaded.props["hoodie.table.checksum"]) == zlib.crc32(b"default.t1")
    assert loaded.precombine_field == "ts" and loaded.partition_fields == ["p"] and loaded.record_key_fields == ["id"]
    assert loaded.table_type == "MERGE_ON_READ" and loaded.props["hoodie.table.version"] == "6"
    assert loaded.hive_style is False and loaded.url_encode is False and loaded.timeline_timezone == "UTC"
    with pytest.raises(HoodieTableError, match="already exists"):
        _create(tmp_path)


def test_load_errors(tmp_path):
    with pytest.raises(HoodieTableError, match="missing") as e:
        TableConfig.load(tmp_path)
    assert "hoodie.properties" in str(e.value)
    _create(tmp_path)
    path = _props_path(tmp_path)
    good = open(path, "rb").read()

    open(path, "wb").write(good.replace(b"hoodie.table.checksum=", b"hoodie.table.checksum=1"))
    with pytest.raises(HoodieTableError, match="checksum mismatch"):
        TableConfig.load(tmp_path)
    open(path, "wb").write(b"hoodie.table.name=x\x00\\u12")
    with pytest.raises(HoodieTableError, match="corrupt"):
        TableConfig.load(tmp_path)
    props = java_properties.loads(good.decode("latin-1"))
    del props["hoodie.table.type"]
    open(path, "w").write(java_properties.dumps(props))
    with pytest.raises(HoodieTableError, match="hoodie.table.type"):
        TableConfig.load(tmp_path)
    props = java_properties.loads(good.decode("latin-1"))
    props["hoodie.table.version"] = "5"
    open(path, "w").write(java_properties.dumps(props))
    with pytest.raises(HoodieTableError, match="version 5"):
        TableConfig.load(tmp_path)


def test_backup_fallback(tmp_path):
    _create(tmp_path)
    path = _props_path(tmp_path)
    os.rename(path, path + ".backup")
    assert TableConfig.load(tmp_path).table_name == "t1"
    open(path, "wb").write(b"garbage=1\n")
    assert TableConfig.load(tmp_path).table_name == "t1"
    open(path + ".backup", "wb").write(b"")
    with pytest.raises(HoodieTableError, match="hoodie.properties"):
        TableConfig.load(tmp_path)


def test_check_writable(tmp_path):
    cfg = _create(tmp_path, extra={"hoodie.metadata.enable": "true"})
    with pytest.raises(HoodieTableError, match="metadata"):
        cfg.check_writable()
    cfg = TableConfig(tmp_path, dict(cfg.props, **{"hoodie.metadata.enable": "false"}))
    cfg.check_writable()
    cfg.props["hoodie.table.metadata.partitions"] = "files"
    with pytest.raises(HoodieTableError, match="metadata.partitions"):
        cfg.check_writable()
    del cfg.props["hoodie.table.metadata.partitions"]
    os.makedirs(tmp_path / ".hoodie" / "metadata")
    with pytest.raises(HoodieTableError, match=".hoodie/metadata"):
        cfg.check_writable()


def test_partition_metadata(tmp_path, fixture_table):
    assert write_partition_metadata(tmp_path, "a=1/b=2", "20250101000000000")
    assert not write_partition_metadata(tmp_path, "a=1/b=2", "20250101000000001")
    assert read_partition_metadata(tmp_path, "a=1/b=2") == {"commitTime": "20250101000000000", "partitionDepth": "2"}
    text = (tmp_path / "a=1/b=2/.hoodie_partition_metadata").read_text()
    assert text.startswith("#partition metadata\n#") and text.endswith("partitionDepth=2\n")
    write_partition_metadata(tmp_path, "", "20250101000000002")
    assert read_partition_metadata(tmp_path, "")["partitionDepth"] == "0"
    assert [p.name for p in (tmp_path / "a=1/b=2").iterdir()] == [".hoodie_partition_metadata"]
    base = fixture_table("sample-mor-parquet-v6_complexkeygen_hivestyle")
    found = list(base.rglob(".hoodie_partition_metadata"))
    assert found
    for f in found:
        rel = str(f.parent.relative_to(base))
        assert read_partition_metadata(base, rel)["partitionDepth"] == str(rel.count("/") + 1)


@pytest.mark.parametrize(
    "key,value",
    [
        ("hoodie.table.partial.update.mode", "IGNORE_DEFAULTS"),
        ("hoodie.table.partial.update.mode", "FILL_UNAVAILABLE"),
        ("hoodie.record.merge.property.hoodie.payload.delete.field", "_change_operation_type"),
    ],
)
def test_version_9_merge_settings_not_supported_are_refused_naming_the_key(key, value):
    """What Hudi 1.1 made of the partial-update and Debezium payloads in version 9 tables is refused, not ignored."""
    from hoodie_stream.errors import HoodieError
    from hoodie_stream.format.record.merge import merge_mode

    props = {"hoodie.record.merge.mode": "EVENT_TIME_ORDERING", "hoodie.table.ordering.fields": "ts", key: value}
    with pytest.raises(HoodieError, match=key.replace(".", r"\.")):
        merge_mode(props)
    without = {k: v for k, v in props.items() if k != key}
    assert merge_mode(without) == ("EVENT_TIME_ORDERING", "ts")
    if key.endswith(".mode"):
        assert merge_mode({**props, key: "NONE"}) == ("EVENT_TIME_ORDERING", "ts")
