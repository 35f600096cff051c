"""Migration 15: a stored profiling run says how much of the run its probes counted (`probe_duty`) and whether its
calls and blocked time were scaled (`scaled`); runs stored before the migration read NULL (no eBPF: the rows come
from ProfileResult objects, as tests/profile/test_profile_store.py builds them)."""

from __future__ import annotations

from pathlib import Path

import pytest

import aiops.store.store as store_module
from aiops.profile.folded import StackRecord
from aiops.profile.outputs import summary
from aiops.profile.session import ProfileResult
from aiops.profile.store_rows import record_profile
from aiops.report.build import build_report
from aiops.report.period import Period
from aiops.store import MIGRATIONS, Store

EPOCH_S = 1767225600.0
PERIOD = Period(EPOCH_S, EPOCH_S + 3600)


def result(pid: int, duty: float = 1.0, probed_s: float = 0.0) -> ProfileResult:
    records = [
        StackRecord(("main", "step", "cudaLaunchKernel"), "cudaLaunchKernel", "launch", 250, 0, "busy"),
        StackRecord(("main", "loader"), "cpu", "cpu", 10, 0, "idle"),
    ]
    return ProfileResult(
        pid=pid,
        duration_s=30.0,
        slice_s=0.1,
        probes=("cudaLaunchKernel",),
        libraries={},
        records=records,
        util_pct=[90.0] * 300,
        idle_slices=0,
        duty=duty,
        period_s=5.0 if duty < 1 else 0.0,
        probed_s=probed_s,
    )


def runs_table_counted(store: Store) -> list[str]:
    section = build_report(store, PERIOD, now_ts_s=EPOCH_S + 3600).section("profile")
    assert section is not None
    runs = section.tables[-1]
    assert runs.headers[-1] == "probes counted"
    return [str(row[-1]) for row in runs.rows]


def test_a_duty_cycled_run_stores_its_fraction_and_that_it_was_scaled() -> None:
    cycled = result(41, duty=0.04, probed_s=1.2)  # 1.2 s of 30 s probed: 4 %
    assert summary(cycled)["sampling"]["probe_fraction"] == pytest.approx(0.04)
    with Store() as store:
        run_id = record_profile(store, cycled, "node0", started_ts_s=EPOCH_S + 60)
        row = store.query("SELECT probe_duty, scaled FROM profile_runs WHERE run_id = ?", [run_id])[0]
        assert row["probe_duty"] == pytest.approx(0.04)
        assert row["scaled"] is True
        assert runs_table_counted(store) == ["4.0%, scaled"]


def test_a_full_run_stores_duty_one_unscaled() -> None:
    with Store() as store:
        record_profile(store, result(42), "node1", started_ts_s=EPOCH_S + 60)
        row = store.query("SELECT probe_duty, scaled FROM profile_runs")[0]
        assert (row["probe_duty"], row["scaled"]) == (1.0, False)
        assert runs_table_counted(store) == ["100%"]


def test_an_old_store_upgrades_with_null_sampling(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.duckdb"
    (m015,) = [m for m in MIGRATIONS if m.version == 15]
    assert m015.name == "profile_sampling"
    with monkeypatch.context() as m:  # a store as aiops wrote it before migration 15
        m.setattr(store_module, "MIGRATIONS", tuple(m for m in MIGRATIONS if m.version < 15))
        with Store(db) as old:
            assert old.schema_version() == 14
            assert "probe_duty" not in old.columns("profile_runs")
            old.ingest_many(
                {
                    "profile_runs": {
                        "run_id": ["prof-7-1"],
                        "ts_s": [EPOCH_S + 60],
                        "node": ["node0"],
                        "pid": [7],
                        "duration_s": [30.0],
                        "slices": [300],
                        "idle_slices": [0],
                        "gpu_util_mean_pct": [None],
                        "probes": ["x"],
                        "calls": [250],
                        "blocked_us": [0],
                    }
                }
            )
    with Store(db) as upgraded:
        assert upgraded.schema_version() == MIGRATIONS[-1].version  # 15 and every later one
        row = upgraded.query("SELECT probe_duty, scaled, calls FROM profile_runs")[0]
        assert row == {"probe_duty": None, "scaled": None, "calls": 250}
        record_profile(upgraded, result(43, duty=0.04, probed_s=1.2), "node0", started_ts_s=EPOCH_S + 120)
        assert runs_table_counted(upgraded) == ["4.0%, scaled", "-"]  # newest first; the old run: unknown
