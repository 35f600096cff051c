"""The report's one-pass aggregates (GROUP BY GPU or sample time, then summed) give the numbers the plain
formulations over every row give (avg, count DISTINCT), NULL metrics of NVML-error rows and empty periods
included."""

from __future__ import annotations

from typing import Any

import pytest

from aiops.nvml_bits import NAMES, THROTTLE
from aiops.report import queries as q
from aiops.report.period import Period
from aiops.store import Store

EPOCH_S = 1767225600.0
PERIOD = Period(EPOCH_S, EPOCH_S + 600)


def _fill(store: Store) -> None:
    """Three GPUs on two nodes every 10 s; gpu2 answers NVML errors (NULL metrics) for a minute, gpu1 is
    throttled and at its power limit now and then, and the samples' values vary with time and GPU."""
    rows: dict[str, list[Any]] = {
        k: []
        for k in (
            "ts_s",
            "gpu",
            "node",
            "util_pct",
            "temp_c",
            "power_w",
            "power_limit_w",
            "slowdown_temp_c",
            "clocks_event_reasons",
            "nvml_error",
        )
    }
    for i in range(60):
        for g, gpu in enumerate(("node0/gpu0", "node0/gpu1", "node1/gpu2")):
            error = gpu == "node1/gpu2" and 20 <= i < 26
            rows["ts_s"].append(EPOCH_S + 10 * i + 0.25 * g)
            rows["gpu"].append(gpu)
            rows["node"].append(gpu.split("/")[0])
            rows["util_pct"].append(None if error else 50.0 + (i * 7 + g * 13) % 47)
            rows["temp_c"].append(None if error else 40.0 + (i * 3 + g * 11) % 41 + 0.1 * g)
            rows["power_w"].append(None if error else (700.0 if g == 1 and i % 9 == 0 else 400.0 + i + g))
            rows["power_limit_w"].append(None if error else 700.0)
            rows["slowdown_temp_c"].append(None if error else 87.0)
            rows["clocks_event_reasons"].append(4 if g == 1 and i % 5 == 0 else (32 if i == 7 else 0))
            rows["nvml_error"].append("GPU_IS_LOST" if error else None)
    store.ingest("gpu_samples", rows)
    store.conn.execute(
        "INSERT INTO topology (component, kind, parent, rack, node, idx) VALUES "
        "('node0/gpu0', 'gpu', 'node0', 'rack0', 'node0', 0), ('node0/gpu1', 'gpu', 'node0', 'rack0', 'node0', 1)"
    )


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    s = Store(tmp_path_factory.mktemp("q") / "q.duckdb")
    _fill(s)
    return s


def _approx(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: pytest.approx(v, rel=1e-12) if isinstance(v, float) else v for k, v in r.items()} for r in rows
    ]


def test_fleet_summary_matches_the_plain_aggregate(store: Store) -> None:
    plain = store.query(
        f"""SELECT count(*) AS samples, count(DISTINCT gpu) AS gpus,
               avg(util_pct) AS util_pct, avg(temp_c) AS temp_c, max(temp_c) AS max_temp_c,
               avg(power_w) AS power_w,
               avg(CASE WHEN clocks_event_reasons & {THROTTLE} != 0 THEN 1.0 ELSE 0.0 END) AS throttled_share,
               count(nvml_error) AS nvml_errors
           FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?""",
        [PERIOD.start_ts_s, PERIOD.end_ts_s],
    )
    got = q.fleet_summary(store, PERIOD)
    assert got["gpus"] == 3 and got["samples"] == 180 and got["nvml_errors"] == 6
    assert [got] == _approx(plain)


def test_fleet_summary_of_an_empty_period() -> None:
    with Store(":memory:") as empty:
        got = q.fleet_summary(empty, PERIOD)
    assert (got["samples"], got["gpus"], got["nvml_errors"]) == (0, 0, 0)
    assert got["util_pct"] is None and got["throttled_share"] is None and got["max_temp_c"] is None


def test_gpu_series_matches_the_plain_aggregate(store: Store) -> None:
    size_s = q.bucket_s(store, PERIOD)
    plain = store.query(
        """SELECT floor((ts_s - $1) / $3) AS bucket, $1 + (floor((ts_s - $1) / $3) + 0.5) * $3 AS ts_s,
               avg(temp_c) AS temp_c, max(temp_c) AS max_temp_c, avg(util_pct) AS util_pct,
               sum(power_w) / count(DISTINCT ts_s) AS power_w,
               sum(power_limit_w) / count(DISTINCT ts_s) AS power_limit_w
           FROM gpu_samples WHERE ts_s >= $1 AND ts_s < $2 GROUP BY 1, 2 ORDER BY 1""",
        [PERIOD.start_ts_s, PERIOD.end_ts_s, size_s],
    )
    got = q.gpu_series(store, PERIOD)
    assert len(got) > 10
    assert got == _approx(plain)


def test_gpu_thermal_matches_the_plain_aggregate(store: Store) -> None:
    plain = store.query(
        """SELECT s.gpu, s.node, coalesce(t.rack, '') AS rack, coalesce(t.idx, 0) AS idx,
               max(s.temp_c) AS max_temp_c, avg(s.temp_c) AS temp_c,
               min(s.slowdown_temp_c - s.temp_c) AS min_headroom_c
           FROM gpu_samples s LEFT JOIN topology t ON t.component = s.gpu
           WHERE s.ts_s >= ? AND s.ts_s < ? GROUP BY 1, 2, 3, 4 ORDER BY 3, 2, 4""",
        [PERIOD.start_ts_s, PERIOD.end_ts_s],
    )
    got = q.gpu_thermal(store, PERIOD)
    assert [r["rack"] for r in got] == ["", "rack0", "rack0"]  # gpu2 has no topology row
    assert got == _approx(plain)


def test_throttle_by_reason_matches_one_query_per_reason(store: Store) -> None:
    parts = [
        f"SELECT '{name}' AS reason, count(*) * 10.0 AS gpu_s, count(DISTINCT gpu) AS gpus "
        f"FROM gpu_samples WHERE ts_s >= $1 AND ts_s < $2 AND clocks_event_reasons & {bit} != 0"
        for bit, name in NAMES.items()
        if bit & THROTTLE
    ]
    plain = store.query(" UNION ALL ".join(parts), [PERIOD.start_ts_s, PERIOD.end_ts_s])
    expected = sorted((r for r in plain if r["gpu_s"]), key=lambda r: -float(r["gpu_s"]))
    got = q.throttle_by_reason(store, PERIOD, 10.0)
    assert got == expected
    assert got == [
        {"reason": "SwPowerCap", "gpu_s": 120.0, "gpus": 1},
        {"reason": "SwThermalSlowdown", "gpu_s": 30.0, "gpus": 3},
    ]
    with Store(":memory:") as empty:
        assert q.throttle_by_reason(empty, PERIOD, 10.0) == []


def test_power_capping_matches_the_plain_aggregate(store: Store) -> None:
    plain = store.query(
        """SELECT count(*) FILTER (WHERE clocks_event_reasons & 4 != 0) * ? AS capped_gpu_s,
               count(DISTINCT gpu) FILTER (WHERE power_w >= 0.98 * power_limit_w) AS gpus_at_limit,
               max(power_w / nullif(power_limit_w, 0)) AS max_draw_share
           FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?""",
        [10.0, PERIOD.start_ts_s, PERIOD.end_ts_s],
    )
    got = q.power_capping(store, PERIOD, 10.0)
    assert got["gpus_at_limit"] == 1 and got["capped_gpu_s"] == 120.0
    assert {k: v for k, v in got.items() if k != "dcim_signals"} == _approx(plain)[0]
    with Store(":memory:") as empty:
        nothing = q.power_capping(empty, PERIOD, 10.0)
    assert (nothing["capped_gpu_s"], nothing["gpus_at_limit"], nothing["max_draw_share"]) == (0.0, 0, None)


def test_gpus_missing_matches_the_plain_aggregate(store: Store) -> None:
    plain = store.query(
        """WITH fleet AS (SELECT count(DISTINCT ts_s) AS times FROM gpu_samples WHERE ts_s >= $1 AND ts_s < $2)
           SELECT gpu, count(*) FILTER (WHERE nvml_error IS NULL) AS samples, any_value(fleet.times) AS times,
               count(nvml_error) AS errors
           FROM gpu_samples, fleet WHERE ts_s >= $1 AND ts_s < $2 GROUP BY gpu
           HAVING count(*) FILTER (WHERE nvml_error IS NULL) < 0.95 * any_value(fleet.times)
           ORDER BY samples LIMIT 20""",
        [PERIOD.start_ts_s, PERIOD.end_ts_s],
    )
    got = q.gpus_missing(store, PERIOD)
    # each GPU samples at its own offset: 180 fleet sample times, 60 (or 54 and 6 errors) per GPU
    assert got[0] == {"gpu": "node1/gpu2", "samples": 54, "times": 180, "errors": 6}
    assert sorted(got, key=lambda r: r["gpu"]) == sorted(plain, key=lambda r: r["gpu"])


def test_rack_power_reads_the_cap_in_force_from_the_dcim_input(tmp_path: Any) -> None:
    """Two racks every 10 s for 10 min; rack0 capped at 30 kW from minute 2 to 5 (a `clear` ends it), then the
    fleet at 50 kW from minute 8: each sample counts under the cap the DCIM input had in force at its time."""
    with Store(tmp_path / "r.duckdb") as s:
        ts = [EPOCH_S + 10 * i for i in range(60)]
        s.ingest(
            "rack_samples",
            {"ts_s": ts * 2, "rack": ["rack0"] * 60 + ["rack1"] * 60, "power_kw": [20.0] * 60 + [25.0] * 60},
        )
        s.ingest(
            "dcim_signals",
            {
                "ts_s": [EPOCH_S + 120, EPOCH_S + 300, EPOCH_S + 480],
                "scope": ["rack0", "rack0", "fleet"],
                "kind": ["cap", "clear", "cap"],
                "budget_kw": [30.0, None, 50.0],
                "source": ["cli"] * 3,
            },
        )
        got = {r["rack"]: r for r in q.rack_power(s, PERIOD)}
    # rack0: 18 samples under 30 kW (120 s .. 290 s), 12 under the fleet's 50 kW (480 s .. 590 s)
    assert (got["rack0"]["min_cap_kw"], got["rack0"]["capped_samples"], got["rack0"]["samples"]) == (
        30.0,
        30,
        60,
    )
    assert (got["rack1"]["min_cap_kw"], got["rack1"]["capped_samples"]) == (50.0, 12)


def test_swpowercap_alone_at_the_full_limit_is_routine_not_a_throttle() -> None:
    """Issue 27 item 7: a GPU drawing its full power shows SwPowerCap at its maximum limit (routine): summarised
    apart, never a bar; SwPowerCap under a lowered limit, or beside a thermal reason, stays a throttle."""
    with Store(":memory:") as s:
        s.ingest(
            "gpu_samples",
            {
                "ts_s": [EPOCH_S + i for i in range(6)],
                "gpu": ["node0/gpu0"] * 3 + ["node0/gpu1"] * 3,
                "node": ["node0"] * 6,
                "clocks_event_reasons": [4, 4, 4 | 32, 4, 4, 0],
                "power_limit_w": [700.0, 700.0, 700.0, 500.0, 500.0, 500.0],
                "power_limit_max_w": [700.0] * 6,
            },
        )
        assert q.routine_power_cap(s, PERIOD, 1.0) == {"gpu_s": 2.0, "gpus": 1}
        assert q.throttle_by_reason(s, PERIOD, 1.0) == [
            {"reason": "SwPowerCap", "gpu_s": 3.0, "gpus": 2},
            {"reason": "SwThermalSlowdown", "gpu_s": 1.0, "gpus": 1},
        ]
