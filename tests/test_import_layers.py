"""The package's imports follow the data path (scripts/check_imports.py), and the check finds what it should."""

import importlib.util
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_imports.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("check_imports", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_hoodie_stream_imports_follow_the_layers():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr + done.stdout


def _package(root, files):
    for rel, text in files.items():
        path = root / "hoodie_stream" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for directory in {(root / "hoodie_stream" / rel).parent for rel in files}:
        (directory / "__init__.py").touch()
    return root / "hoodie_stream"


def test_the_check_reports_upward_sibling_circular_and_leaf_imports(tmp_path, capsys):
    check = _load_script()
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "from .streaming_sink.sink import Sink\n",
            "errors.py": "import hoodie_stream.format.timeline\n",  # upward
            "format/timeline.py": "from ..errors import E\nfrom .. import local_spark\n",  # down, and a leaf: fine
            "format/reader.py": "def f():\n    from ..streaming_sink import sink\n",  # upward, lazily
            "compaction/run.py": "from ..bucket_assign.assigner import A\n",  # sibling ...
            "bucket_assign/assigner.py": "from hoodie_stream.compaction import run\n",  # ... and back: a circle
            "streaming_sink/sink.py": "from hoodie_stream import errors\nfrom ..compaction.run import R\n",  # fine
            "local_spark.py": "from .errors import E\n",  # a leaf imports nothing of the package
            "demo.py": "from hoodie_stream import Sink\nfrom .local_spark import x\n",  # __init__'s name: same layer
        },
    )
    problems = check.violations(check.all_imports(pkg))
    text = "\n".join(problems)
    assert "errors.py:1: errors -> format (import hoodie_stream.format.timeline): format is above errors" in text
    assert "format/reader.py:2: format -> streaming_sink" in text
    assert "compaction/run.py:1: compaction -> bucket_assign" in text and "siblings of one layer" in text
    assert "bucket_assign/assigner.py:1: bucket_assign -> compaction" in text
    assert "local_spark.py:1: local_spark -> errors" in text and "is a leaf" in text
    assert "demo.py:1: demo -> __init__" in text
    single = [p for p in problems if not p.startswith("import circle")]
    assert len(single) == 6 and not [p for p in single if "timeline.py" in p or "sink.py" in p], single
    circles = sorted(p.partition(":")[0] for p in problems if p.startswith("import circle"))
    assert circles == [
        "import circle between bucket_assign, compaction",
        "import circle between errors, format, local_spark, streaming_sink",
    ], problems
    assert check.main([], pkg=pkg) == 1
    assert "8 import(s) against the layers" in capsys.readouterr().err


def test_a_clean_package_passes(tmp_path):
    check = _load_script()
    pkg = _package(
        tmp_path,
        {
            "__init__.py": "from .streaming_sink.sink import Sink\n",
            "format/timeline.py": "from ..errors import E\nfrom ..storage.local import L\n",
            "errors.py": "",
            "storage/local.py": "from hoodie_stream.errors import E\n",
            "streaming_sink/sink.py": "from ..format import timeline\n",
            "__main__.py": "from . import demo\n",
            "demo.py": "from .local_spark import local_session_builder\n",
            "local_spark.py": "import os\n",
        },
    )
    assert check.violations(check.all_imports(pkg)) == []


def test_inside_format_the_subpackages_have_layers_too(tmp_path):
    """The reader importing a view of itself (a circle inside `format`), and a timeline module importing the reader
    (upward inside `format`), are reported; down imports inside `format` and its package docstring are fine."""
    check = _load_script()
    pkg = _package(
        tmp_path,
        {
            "errors.py": "",
            "format/__init__.py": '"""the format"""\n',
            "format/read/table_reader.py": "from ..views.table_html import html\nfrom ..timeline import instant\n",
            "format/views/table_html.py": "from ..read.table_reader import TableReader\n",
            "format/timeline/instant.py": "from ...errors import E\nfrom ..read import table_reader\n",
            "format/hoodie_table.py": "from .read.table_reader import TableReader\nfrom .views import table_html\n",
        },
    )
    problems = check.violations(check.all_imports(pkg))
    text = "\n".join(problems)
    assert (
        "format/read/table_reader.py:1: hoodie_stream.format: read -> views" in text and "views is above read" in text
    )
    assert "format/timeline/instant.py:2: hoodie_stream.format: timeline -> read" in text
    circles = [p.partition(":")[0] for p in problems if "import circle" in p]
    assert circles == ["hoodie_stream.format"], problems
    assert "hoodie_stream.format: import circle between read, timeline, views" in text
    assert len(problems) == 3, problems
