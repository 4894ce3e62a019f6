"""Only the storage layer touches files: no module of the package outside hoodie_stream/storage/ calls the builtin
`open`, the file operations of `os` or `shutil` (methods such as `storage.open_output(` are fine)."""

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "hoodie_stream"
FORBIDDEN = re.compile(
    r"(?<![\w.])open\(|\bos\.(replace|rename|link|remove|unlink|listdir|scandir|makedirs|mkdir|rmdir|walk)\b"
    r"|\bshutil\b|\bos\.path\.(getsize|exists|isdir|isfile)\b|\bpa\.OSFile\("
)


def offending_lines(root=PACKAGE):
    found = []
    for path in sorted(root.rglob("*.py")):
        if "storage" in path.relative_to(root).parts[:1]:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if FORBIDDEN.search(code):
                found.append(f"{path.relative_to(root.parent)}:{number}: {line.strip()}")
    return found


def test_no_file_operation_outside_the_storage_layer():
    assert offending_lines() == []


def test_the_check_finds_file_operations(tmp_path):
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "local.py").write_text("import os\nos.remove('x')\n")
    (tmp_path / "m.py").write_text(
        "with open('x') as f: pass\nimport shutil\nos.listdir('.')\nstorage.open_output('x')  # fine\n"
    )
    assert [line.split(":", 2)[1] for line in offending_lines(tmp_path)] == ["1", "2", "3"]
