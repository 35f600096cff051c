"""procfs: CPU and iowait over the interval from /proc/stat jiffies, memory from /proc/meminfo, PSI; errors are
rows (once while they last), never exceptions."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from aiops.store import Store
from collectors.procfs import (
    CpuTimes,
    ProcfsCollector,
    cpu_percentages,
    mem_used_pct,
    parse_cpu_line,
    parse_psi,
)
from tests.host_helpers import write

STAT_1 = (
    "cpu  1000 0 500 8000 500 0 0 0 0 0\ncpu0 1000 0 500 8000 500 0 0 0 0 0\nintr 1 2 3\nbtime 1700000000\n"
)
# +300 user, +100 system, +500 idle, +100 iowait = 1000 jiffies: 40 % busy, 10 % iowait
STAT_2 = (
    "cpu  1300 0 600 8500 600 0 0 0 0 0\ncpu0 1300 0 600 8500 600 0 0 0 0 0\nintr 1 2 3\nbtime 1700000000\n"
)
MEMINFO = (
    "MemTotal:       16000000 kB\nMemFree:         1000000 kB\nMemAvailable:   12000000 kB\nBuffers: 1 kB\n"
)
PSI_CPU_OLD = "some avg10=2.62 avg60=5.27 avg300=4.61 total=150357486\n"  # kernels before 5.13: no full line
PSI_IO = "some avg10=0.31 avg60=0.73 avg300=0.62 total=22587445\nfull avg10=0.31 avg60=0.61 avg300=0.50 total=20696067\n"
PSI_MEM = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"


def _proc(root: Path, stat: str = STAT_1) -> None:
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc" / "stat").write_text(stat)
    (root / "proc" / "meminfo").write_text(MEMINFO)
    write(
        root,
        {
            "proc/pressure/cpu": PSI_CPU_OLD.strip(),
            "proc/pressure/io": PSI_IO.strip(),
            "proc/pressure/memory": PSI_MEM.strip(),
        },
    )


def test_parsers() -> None:
    assert parse_cpu_line(STAT_1) == CpuTimes(busy=1500, iowait=500, total=10000)
    assert cpu_percentages(CpuTimes(1500, 500, 10000), CpuTimes(1900, 600, 11000)) == (40.0, 10.0)
    assert cpu_percentages(CpuTimes(1, 1, 10), CpuTimes(1, 1, 10)) == (None, None)
    assert cpu_percentages(CpuTimes(0, 500, 100), CpuTimes(50, 400, 200)) == (
        50.0,
        0.0,
    )  # iowait stepped back
    assert mem_used_pct(MEMINFO) == 25.0
    assert mem_used_pct("MemTotal: 100 kB\nMemFree: 10 kB\nBuffers: 10 kB\nCached: 30 kB\n") == 50.0  # < 3.14
    assert mem_used_pct("nothing") is None
    assert parse_psi(PSI_IO) == {"some": (0.31, 0.73, 0.62, 22587445), "full": (0.31, 0.61, 0.5, 20696067)}


def test_interval_figures_and_pressure_land_in_the_store(tmp_path: Path, store: Store) -> None:
    _proc(tmp_path)
    collector = ProcfsCollector("node2", tmp_path)  # the interval starts here
    (tmp_path / "proc" / "stat").write_text(STAT_2)
    tables = collector.collect(10.0)
    assert set(tables) == {"host_samples", "psi_samples"}
    store.ingest_many(tables)
    assert store.query(
        "SELECT node, cpu_util_pct, iowait_pct, loader_wait_ms, mem_used_pct FROM host_samples"
    ) == [
        {
            "node": "node2",
            "cpu_util_pct": 40.0,
            "iowait_pct": 10.0,
            "loader_wait_ms": None,
            "mem_used_pct": 25.0,
        }
    ]
    psi = {r["resource"]: r for r in store.query("SELECT * FROM psi_samples")}
    assert psi["cpu"]["some_avg10"] == 2.62 and psi["cpu"]["some_total_us"] == 150357486
    assert psi["cpu"]["full_avg10"] is None and psi["cpu"]["full_total_us"] is None
    assert psi["io"]["full_total_us"] == 20696067
    # no time passed between two reads of the same counters: no figure rather than a division by zero
    assert collector.collect(11.0)["host_samples"].to_pylist()[0]["cpu_util_pct"] is None


def test_missing_and_malformed_files_are_rows_once_while_they_last(tmp_path: Path) -> None:
    _proc(tmp_path)
    collector = ProcfsCollector("node0", tmp_path)
    (tmp_path / "proc" / "meminfo").unlink()
    (tmp_path / "proc" / "pressure" / "io").write_text("garbage\n")
    first = collector.collect(1.0)
    errors = first["collector_errors"].to_pylist()
    assert sorted((e["error"], e["component"], e["collector"]) for e in errors) == [
        ("malformed", "node0", "procfs"),
        ("missing", "node0", "procfs"),
    ]
    assert first["host_samples"].to_pylist()[0]["mem_used_pct"] is None
    assert {r["resource"] for r in first["psi_samples"].to_pylist()} == {"cpu", "memory"}
    assert "collector_errors" not in collector.collect(2.0)  # still broken: already reported
    (tmp_path / "proc" / "meminfo").write_text(MEMINFO)
    assert "collector_errors" not in collector.collect(3.0)
    (tmp_path / "proc" / "meminfo").unlink()
    again = collector.collect(4.0)["collector_errors"].to_pylist()  # broken again after it cleared
    assert [e["error"] for e in again] == ["missing"]


def test_no_pressure_directory_is_reported_once(tmp_path: Path) -> None:
    _proc(tmp_path)
    for name in ("cpu", "io", "memory"):
        (tmp_path / "proc" / "pressure" / name).unlink()
    (tmp_path / "proc" / "pressure").rmdir()
    collector = ProcfsCollector("node0", tmp_path)
    first = collector.collect(1.0)
    (status,) = first["collector_errors"].to_pylist()
    assert status["error"] == "unavailable" and status["detail"].startswith("PSI unavailable")
    assert "psi_samples" not in first and first["host_samples"].num_rows == 1
    for ts in (2.0, 3.0):
        assert "collector_errors" not in collector.collect(ts)


@pytest.mark.parametrize("stat", ["", "cpu  x y z\n"])
def test_unparsable_stat_is_a_row(tmp_path: Path, stat: str) -> None:
    _proc(tmp_path, stat)
    errors = ProcfsCollector("node0", tmp_path).collect(1.0)["collector_errors"].to_pylist()
    assert [e["error"] for e in errors] == ["malformed"]


def test_nothing_there_is_never_an_exception(tmp_path: Path) -> None:
    tables = ProcfsCollector("node0", tmp_path / "absent").collect(1.0)
    assert {e["error"] for e in tables["collector_errors"].to_pylist()} == {"missing", "unavailable"}


def test_psi_disabled_at_boot_is_reported_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _proc(tmp_path)
    original = Path.read_bytes

    def read_bytes(path: Path) -> bytes:
        if path.parent.name == "pressure":  # what a kernel booted with psi=0 answers
            raise OSError(errno.EOPNOTSUPP, "Operation not supported")
        return original(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    collector = ProcfsCollector("node0", tmp_path)
    (status,) = collector.collect(1.0)["collector_errors"].to_pylist()
    assert status["error"] == "unavailable" and "disabled" in status["detail"]
    assert set(collector.collect(2.0)) == {"host_samples"}
