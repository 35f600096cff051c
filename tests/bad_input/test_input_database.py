"""Faults of the database file (issue 11, item 5): a truncated or corrupt workspace is one line and exit 2 in
every command that opens it (and `aiops audit verify` fails on it); a read-only directory is exit 2; a full
disk is a clear error and leaves no half-written batch. Before: a truncated file crashed `analyze` and
`dcim cap` with a DuckDB traceback and `audit verify` exited 0, and a full disk gave a traceback."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import pytest

from aiops.cli.main import main
from tests.host_helpers import require_root
from tests.service_helpers import free_port

SCENARIO = (
    "name: faults\nseed: 3\nduration_s: 240\n"
    "cluster: {racks: 2, nodes_per_rack: 2, gpus_per_node: 8, nics_per_node: 1}\n"
)
GPUS = 32


@pytest.fixture(scope="module")
def good_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("good")
    (where / "s.yaml").write_text(SCENARIO)
    db = where / "run.duckdb"
    assert main(["simulate", "--scenario", str(where / "s.yaml"), "--db", str(db)]) == 0
    return db


def truncated(good: Path, target: Path) -> None:
    data = good.read_bytes()
    target.write_bytes(data[: len(data) // 2])


def flipped(good: Path, target: Path) -> None:
    data = bytearray(good.read_bytes())
    for header in (4096, 8192):  # both database headers: their checksums no longer match
        data[header + 8 : header + 24] = b"X" * 16
    target.write_bytes(bytes(data))


def garbage(good: Path, target: Path) -> None:
    target.write_bytes(b"\x00\xffnot a database" * 4096)


DAMAGE = {"truncated": truncated, "flipped": flipped, "garbage": garbage}
COMMANDS = {
    "analyze": ["analyze", "--db"],
    "dcim cap": ["dcim", "cap", "--fleet", "--kw", "10", "--db"],
    "actions list": ["actions", "list", "--db"],
    "audit verify": ["audit", "verify", "--db"],
    "dcim status": ["dcim", "status", "--db"],
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_damaged_database_exits_2(
    command: str, damage: str, good_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "w.duckdb"
    DAMAGE[damage](good_db, db)
    code = main([*COMMANDS[command], str(db)])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert str(db) in err and ("damaged" in err or "cannot open as a DuckDB database" in err)


@pytest.mark.parametrize(
    "argv", [["chat", "--db"], ["run", "--listen", "LISTEN", "--duration-s", "2", "--db"]]
)
def test_chat_and_the_service_refuse_a_truncated_database(
    good_db: Path, tmp_path: Path, argv: list[str]
) -> None:
    """In a child process (chat reads a terminal, the service serves): one line on stderr, exit 2."""
    db = tmp_path / "w.duckdb"
    truncated(good_db, db)
    argv = [f"127.0.0.1:{free_port()}" if a == "LISTEN" else a for a in argv]
    done = subprocess.run(
        [sys.executable, "-m", "aiops.cli.main", *argv, str(db)],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.returncode == 2, done.stderr
    assert "damaged" in done.stderr and "Traceback" not in done.stderr


@contextmanager
def tmpfs(where: Path, options: str) -> Iterator[Path]:
    require_root()
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_a_read_only_directory_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO)
    with tmpfs(tmp_path / "ro", "ro,size=1M") as ro:
        for db in (ro / "x.duckdb", ro / "sub" / "x.duckdb"):
            code = main(["simulate", "--scenario", str(tmp_path / "s.yaml"), "--db", str(db)])
            err = " ".join(capsys.readouterr().err.split())
            assert code == 2 and f"{db}: cannot write here" in err


def test_a_full_disk_is_a_clear_error_and_no_half_written_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "s.yaml").write_text(SCENARIO.replace("duration_s: 240", "duration_s: 900"))
    kept = tmp_path / "kept"
    with tmpfs(tmp_path / "full", "size=2M") as full:
        code = main(["simulate", "--scenario", str(tmp_path / "s.yaml"), "--db", str(full / "x.duckdb")])
        err = " ".join(capsys.readouterr().err.split())
        shutil.copytree(full, kept)
    assert code == 2 and f"{full / 'x.duckdb'}: the disk is full" in err, err
    with duckdb.connect(str(kept / "x.duckdb")) as conn:  # what the full disk left: whole batches only
        per_ts = conn.execute("SELECT count(*) FROM gpu_samples GROUP BY ts_s").fetchall()
        minutes = len(per_ts) / 60
    assert {n for (n,) in per_ts} <= {GPUS} and minutes == int(minutes)
