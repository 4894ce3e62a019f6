import os
import random
import re

import pytest

from conftest import LOG_FILES, unzip_table, v6_table_zips
from hoodie_stream.checkpoints.recovery import remove_leftovers
from hoodie_stream.errors import HoodieFormatError
from hoodie_stream.format.file_group.file_names import (
    BaseFileName,
    LogFileName,
    base_file_name,
    is_base_file,
    is_log_file,
    log_file_name,
    log_sort_key,
    new_file_id,
    parse_base_file_name,
    parse_log_file_name,
    write_token,
)
from hoodie_stream.format.table.markers import create_marker, delete_markers, list_markers, marker_dir, marker_name
from hoodie_stream.storage import LocalStorage
from hoodie_stream.storage.local import temp_name

FID = "6d3d1d6e-2298-4080-a0c1-494877d6f40a-0"


def test_real_names_parse_and_rebuild():
    base = f"{FID}_0-13-60_20250618054711154.parquet"
    assert parse_base_file_name(base) == BaseFileName(FID, "0-13-60", "20250618054711154")
    assert base_file_name(FID, "0-13-60", "20250618054711154") == base
    log = f".{FID}_20250618054711154.log.1_0-26-85"
    assert parse_log_file_name(log) == LogFileName(FID, "20250618054711154", 1, "0-26-85", False)
    assert log_file_name(FID, "20250618054711154", 1, "0-26-85") == log
    assert parse_log_file_name(log).name == log
    assert is_base_file(base) and not is_log_file(base)
    assert is_log_file(log) and not is_base_file(log)


def test_fixture_file_names():
    names = [p.name for p in LOG_FILES.glob("*/.*")]
    assert names and all(is_log_file(n) for n in names)


@pytest.mark.parametrize("zip_path", v6_table_zips(), ids=lambda z: z.stem)
def test_fixture_table_file_names(zip_path, tmp_path):
    base = unzip_table(zip_path, tmp_path)
    for _directory, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        for name in files:
            if name.endswith(".parquet"):
                parsed = parse_base_file_name(name)
                assert parsed and base_file_name(*parsed) == name
            elif ".log." in name:
                parsed = parse_log_file_name(name)
                assert parsed and parsed.name == name
            else:
                assert not is_base_file(name) and not is_log_file(name), name


def test_optional_token_cdc_and_non_matches():
    assert parse_log_file_name(f".{FID}_001.log.3") == LogFileName(FID, "001", 3, None, False)
    assert log_file_name(FID, "001", 3, None) == f".{FID}_001.log.3"
    cdc = parse_log_file_name(f".{FID}_001.log.2_1-0-1.cdc")
    assert cdc == LogFileName(FID, "001", 2, "1-0-1", True) and cdc.name == f".{FID}_001.log.2_1-0-1.cdc"
    for bad in [
        f"{FID}_001.log.1_0-1-2",
        f".{FID}_001.log.x_0-1-2",
        f".{FID}_001.log.1_0-1",
        f".{FID}_001.log.1_0-1-2.tmp",
        ".commits_.archive.1_1-0-1",
        f".{FID}_001.log.1_0-1-2.marker.APPEND",
        "_tmp_abc_f_001.log.1_0-1-2.writing",
    ]:
        assert parse_log_file_name(bad) is None, bad
    for bad in [
        f"{FID}_0-1-2_001.parquet.marker.CREATE",
        f"{FID}_001.parquet",
        f".{FID}_0-1-2_001.parquet",
        "part-00000.parquet",
        f"{FID}_0-1-2_001.orc",
    ]:
        assert parse_base_file_name(bad) is None, bad


def test_builders_validate():
    assert write_token(3, 14, 159) == "3-14-159"
    with pytest.raises(HoodieFormatError):
        write_token(-1, 0, 0)
    with pytest.raises(HoodieFormatError):
        base_file_name("a_b", "0-0-0", "1")
    with pytest.raises(HoodieFormatError):
        base_file_name(FID, "0-0", "1")
    with pytest.raises(HoodieFormatError):
        log_file_name(FID, "1", 0, "0-0-0")
    fid = new_file_id()
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}-0", fid)
    assert new_file_id(2).endswith("-2") and new_file_id() != fid


def test_log_sort_key_follows_hudi_comparator():
    ordered = [
        f".{FID}_001.log.1",  # null write token sorts first
        f".{FID}_001.log.1_0-1-1",
        f".{FID}_001.log.1_0-1-1.cdc",  # same token: suffix '' < '.cdc'
        f".{FID}_001.log.1_10-0-0",  # tokens compare as strings
        f".{FID}_001.log.1_9-0-0",
        f".{FID}_001.log.2_0-0-0",
        f".{FID}_001.log.10_0-0-0",  # versions compare as integers
        f".{FID}_002.log.1_0-0-0",  # base instant first
    ]
    shuffled = ordered[:]
    random.Random(7).shuffle(shuffled)
    assert sorted(shuffled, key=log_sort_key) == ordered
    assert sorted(map(parse_log_file_name, shuffled), key=log_sort_key) == [parse_log_file_name(n) for n in ordered]


def test_markers(tmp_path):
    base = str(tmp_path)
    log = log_file_name(FID, "001", 2, "0-1-2")
    assert list_markers(base, "002") == []
    p1 = create_marker(base, "002", f"a/b/{log}", "APPEND")
    assert p1 == f"{marker_dir('002')}/a/b/{log}.marker.APPEND" == f".hoodie/.temp/002/a/b/{log}.marker.APPEND"
    create_marker(base, "002", base_file_name(FID, "0-1-2", "002"), "CREATE")
    create_marker(base, "002", f"a/{base_file_name(FID, '0-1-2', '002')}", "MERGE")
    create_marker(base, "002", f"a/{base_file_name(FID, '0-1-2', '002')}", "MERGE")  # idempotent
    assert os.path.getsize(os.path.join(base, p1)) == 0
    assert list_markers(base, "002") == [
        (f"{FID}_0-1-2_002.parquet", "CREATE"),
        (f"a/{FID}_0-1-2_002.parquet", "MERGE"),
        (f"a/b/{log}", "APPEND"),
    ]
    with pytest.raises(HoodieFormatError):
        marker_name("x", "UPSERT")
    delete_markers(base, "002")
    assert not os.path.exists(os.path.join(base, marker_dir("002"))) and list_markers(base, "002") == []
    delete_markers(base, "002")


def test_a_marker_write_cut_short_leaves_a_temp_file_no_listing_shows(tmp_path):
    """A task cancelled while it created a marker leaves the storage layer's temporary file in the marker
    directory: the markers are listed without it, recovery removes it."""
    base = str(tmp_path)
    create_marker(base, "004", f"p/{base_file_name(FID, '0-1-2', '004')}", "CREATE")
    name = marker_name(f"{FID}_1-1-2_004.parquet", "CREATE")
    left = os.path.join(base, marker_dir("004"), "p", temp_name(name))
    open(left, "wb").close()
    assert list_markers(base, "004") == [(f"p/{FID}_0-1-2_004.parquet", "CREATE")]
    storage = LocalStorage(base)
    assert [f.name for f in storage.list(f"{marker_dir('004')}/p")] == [name.replace("1-1-2", "0-1-2")]
    assert os.path.basename(left) in [f.name for f in storage.list(marker_dir("004"), recursive=True, temp=True)]
    remove_leftovers(base)
    assert not os.path.exists(left)


def test_timeline_server_markers(tmp_path):
    root = os.path.join(str(tmp_path), marker_dir("003"))
    os.makedirs(root)
    with open(os.path.join(root, "MARKERS.type"), "w") as f:
        f.write("TIMELINE_SERVER_BASED")
    with open(os.path.join(root, "MARKERS0"), "w") as f:
        f.write("p/x_0-1-2_003.parquet.marker.CREATE\np/.x_001.log.1_0-1-2.marker.APPEND\n")
    with open(os.path.join(root, "MARKERS1"), "w") as f:
        f.write("")
    assert list_markers(str(tmp_path), "003") == [
        ("p/.x_001.log.1_0-1-2", "APPEND"),
        ("p/x_0-1-2_003.parquet", "CREATE"),
    ]
    with open(os.path.join(root, "MARKERS1"), "w") as f:
        f.write("junk\n")
    with pytest.raises(HoodieFormatError):
        list_markers(str(tmp_path), "003")
