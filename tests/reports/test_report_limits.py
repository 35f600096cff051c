"""`aiops report` bounds its own DuckDB connection (memory limit with spilling to a temporary directory,
threads), so that a report of a long period on a big fleet cannot take the host's memory; the bounds never
reach a store the service shares (a scheduled report), and bad values exit 2 naming the option."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aiops.cli.main import main
from aiops.errors import InputError
from aiops.report import limits
from aiops.report import write as report_write
from aiops.report.period import Period
from aiops.store import Store

EPOCH_S = 1767225600.0


def _settings(store: Store) -> dict[str, Any]:
    names = ("memory_limit", "threads", "temp_directory")
    row = store.conn.execute("SELECT " + ", ".join(f"current_setting('{n}')" for n in names)).fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def _db(tmp_path: Path) -> Path:
    path = tmp_path / "r.duckdb"
    with Store(path) as store:
        store.ingest(
            "gpu_samples",
            {
                "ts_s": [EPOCH_S + i for i in range(30)],
                "gpu": ["node0/gpu0"] * 30,
                "node": ["node0"] * 30,
                "temp_c": [50.0] * 30,
            },
        )
        store.commit_pending()
    return path


def test_the_report_connection_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []
    real = report_write.write_report

    def spy(store: Store, period: Period, out_dir: Path, formats: tuple[str, ...]) -> Any:
        seen.append({**_settings(store), "read_only": store.read_only})
        return real(store, period, out_dir, formats)

    monkeypatch.setattr(report_write, "write_report", spy)
    db = _db(tmp_path)
    argv = [
        "report",
        "--db",
        str(db),
        "--out",
        str(tmp_path / "out"),
        "--start",
        str(EPOCH_S),
        "--end",
        "latest",
    ]
    assert main([*argv, "--format", "md", "--memory-limit-mb", "300", "--threads", "1"]) == 0
    assert main([*argv, "--format", "md"]) == 0
    bounded, default = seen
    assert bounded["read_only"] and default["read_only"]
    assert bounded["memory_limit"].startswith("286.") and bounded["threads"] == 1  # 300 MB is 286.1 MiB
    assert default["memory_limit"].startswith("488.") and default["threads"] == limits.default_threads()
    assert "aiops-report-" in bounded["temp_directory"]
    assert not Path(bounded["temp_directory"]).exists()  # the spill directory is removed afterwards
    assert list((tmp_path / "out").glob("report-*.md"))


def test_a_report_on_a_shared_store_leaves_its_settings(tmp_path: Path) -> None:
    """A scheduled report runs on the service's store: write_report itself sets nothing."""
    with Store(_db(tmp_path)) as store:
        before = _settings(store)
        report_write.write_report(store, Period(EPOCH_S, EPOCH_S + 60), tmp_path / "out", ("md",))
        assert _settings(store) == before


@pytest.mark.parametrize(
    ("args", "field"),
    [(["--memory-limit-mb", "10"], "--memory-limit-mb"), (["--threads", "0"], "--threads")],
)
def test_bad_limits_exit_2(
    tmp_path: Path, args: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = _db(tmp_path)
    assert main(["report", "--db", str(db), "--out", str(tmp_path / "out"), *args]) == 2
    assert field in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_apply_refuses_bad_values(tmp_path: Path) -> None:
    with Store(":memory:") as store, pytest.raises(InputError, match="--threads"):
        limits.apply_report_limits(store, memory_limit_mb=512, threads=0, temp_dir=tmp_path)
