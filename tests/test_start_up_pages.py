"""`aiops run` hands its start-up code back to the kernel once (aiops/service/malloc.py, docs/BENCHMARKS.md
"Footprint"): only read-only file mappings are asked about, and DuckDB's library pages that opening a database
touched leave the resident set."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from aiops.service.malloc import code_mappings

MAPS = """\
55d0c0a00000-55d0c0a5c000 r--p 00000000 fd:01 1234 /usr/bin/python3.11
55d0c0a5c000-55d0c0d2e000 r-xp 0005c000 fd:01 1234 /usr/bin/python3.11
55d0c1000000-55d0c1050000 rw-p 0032e000 fd:01 1234 /usr/bin/python3.11
7f00aa000000-7f00ab000000 rw-p 00000000 00:00 0
7f00ab000000-7f00ab100000 r--s 00000000 00:01 99 /dev/shm/shared
7f00ac000000-7f00ac400000 r-xp 00000000 fd:01 5678 /venv/_duckdb.cpython-311-x86_64-linux-gnu.so
7f00ad000000-7f00ad001000 r--p 00000000 00:00 0 [vvar]
"""
PROBE = """
import json, duckdb
from aiops.service.malloc import release_start_up_code
def resident_kb():
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if "-" in head[0] and not head[0].endswith(":"):
            inside = "_duckdb" in line
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total
connection = duckdb.connect(":memory:")
connection.execute("CREATE TABLE t AS SELECT range AS x FROM range(1000)")
connection.execute("SELECT sum(x) FROM t").fetchall()
before = resident_kb()
asked = release_start_up_code()
import _duckdb
print(json.dumps({"library": _duckdb.__file__, "before_kb": before, "after_kb": resident_kb(), "asked": asked,
                  "still": connection.execute("SELECT sum(x) FROM t").fetchall()[0][0]}))
"""


def test_only_read_only_file_mappings_are_asked_about() -> None:
    assert [(start, end - start, path) for start, end, path in code_mappings(MAPS)] == [
        (0x55D0C0A00000, 0x5C000, "/usr/bin/python3.11"),
        (0x55D0C0A5C000, 0x2D2000, "/usr/bin/python3.11"),
        (0x7F00AC000000, 0x400000, "/venv/_duckdb.cpython-311-x86_64-linux-gnu.so"),
    ]


def test_duckdbs_start_up_code_leaves_the_resident_set_and_duckdb_still_works(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the kernel pages out a file's pages only for its owner or root (the agent runs as root)")
    # a copy of DuckDB's library of its own: a page another process maps too (any other process of this
    # environment running DuckDB now) is never paged out
    library = next(Path(duckdb.__file__).parent.parent.glob("_duckdb*.so"))
    shutil.copy(library, tmp_path / library.name)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path[1:]]))
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env=env,
        cwd=tmp_path,
    )
    found = json.loads(done.stdout)
    assert found["library"].startswith(str(tmp_path)), found
    assert found["asked"] > 0 and found["still"] == 499500, found
    assert found["before_kb"] > 10_000, found  # opening a database touches tens of MB of its code
    assert found["after_kb"] < found["before_kb"] / 4, found
