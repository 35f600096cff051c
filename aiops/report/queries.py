"""Aggregates of GPU telemetry for a period, computed in DuckDB (GROUP BY time bucket or component): a report
never pulls raw sample rows into Python. Each function returns a few rows per bucket, GPU or reason."""

from __future__ import annotations

from typing import Any

from aiops.nvml_bits import NAMES, SW_POWER_CAP, THROTTLE
from aiops.report.intended import INTENDED_CAP, register_limits
from aiops.report.period import Period
from aiops.store import Store
from aiops.store.migrations import TIME_SERIES_TABLES

BUCKETS = 96  # points of a time-series plot over the period

Row = dict[str, Any]


def bucket_s(store: Store, period: Period) -> float:
    """The time bucket of the period's plots: the span GPU telemetry covers in it over BUCKETS."""
    row = store.query(
        "SELECT min(ts_s) AS lo, max(ts_s) AS hi FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?",
        [period.start_ts_s, period.end_ts_s],
    )[0]
    span_s = (row["hi"] - row["lo"]) if row["lo"] is not None else period.length_s
    return max(span_s / BUCKETS, 1.0)


def sample_interval_s(store: Store, period: Period) -> float:
    """The median spacing of GPU sample timestamps in the period (1.0 when there are fewer than two)."""
    value = store.scalar(
        "SELECT median(d) FROM (SELECT ts_s - lag(ts_s) OVER (ORDER BY ts_s) AS d "
        "FROM (SELECT DISTINCT ts_s FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?)) WHERE d > 0",
        [period.start_ts_s, period.end_ts_s],
    )
    return float(value) if value else 1.0


def fleet_summary(store: Store, period: Period) -> Row:
    """GPU count, samples, mean utilisation, temperatures, power and the share of samples throttled. One pass
    grouped by GPU (a few thousand groups), then summed: no DISTINCT over every sample row."""
    rows = store.query(
        f"""WITH g AS (
               SELECT count(*) AS n, sum(util_pct) AS util_sum, count(util_pct) AS util_n,
                   sum(temp_c) AS temp_sum, count(temp_c) AS temp_n, max(temp_c) AS max_temp_c,
                   sum(power_w) AS power_sum, count(power_w) AS power_n,
                   count(*) FILTER (WHERE clocks_event_reasons & {THROTTLE} != 0) AS throttled,
                   count(nvml_error) AS nvml_errors
               FROM gpu_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY gpu)
           SELECT CAST(coalesce(sum(n), 0) AS BIGINT) AS samples, count(*) AS gpus,
               sum(util_sum) / nullif(sum(util_n), 0) AS util_pct,
               sum(temp_sum) / nullif(sum(temp_n), 0) AS temp_c, max(max_temp_c) AS max_temp_c,
               sum(power_sum) / nullif(sum(power_n), 0) AS power_w,
               sum(throttled) / sum(n) AS throttled_share,
               CAST(coalesce(sum(nvml_errors), 0) AS BIGINT) AS nvml_errors
           FROM g""",
        [period.start_ts_s, period.end_ts_s],
    )
    return rows[0]


def gpu_series(store: Store, period: Period) -> list[Row]:
    """Per time bucket: mean and max temperature, fleet power draw and limit (W), mean utilisation. Grouped by
    sample time first (the fleet's power at each time), then by bucket: no DISTINCT over every row."""
    size_s = bucket_s(store, period)
    return store.query(
        """WITH t AS (
               SELECT ts_s, sum(temp_c) AS temp_sum, count(temp_c) AS temp_n, max(temp_c) AS max_temp_c,
                   sum(util_pct) AS util_sum, count(util_pct) AS util_n,
                   sum(power_w) AS power_w, sum(power_limit_w) AS power_limit_w
               FROM gpu_samples WHERE ts_s >= $1 AND ts_s < $2 GROUP BY ts_s)
           SELECT floor((ts_s - $1) / $3) AS bucket, $1 + (floor((ts_s - $1) / $3) + 0.5) * $3 AS ts_s,
               sum(temp_sum) / nullif(sum(temp_n), 0) AS temp_c, max(max_temp_c) AS max_temp_c,
               sum(util_sum) / nullif(sum(util_n), 0) AS util_pct,
               sum(power_w) / count(*) AS power_w, sum(power_limit_w) / count(*) AS power_limit_w
           FROM t GROUP BY 1, 2 ORDER BY 1""",
        [period.start_ts_s, period.end_ts_s, size_s],
    )


def gpu_thermal(store: Store, period: Period) -> list[Row]:
    """Per GPU: its node and rack, max temperature, least headroom to the slowdown threshold (°C)."""
    return store.query(
        """WITH s AS (
               SELECT gpu, node, max(temp_c) AS max_temp_c, sum(temp_c) AS temp_sum, count(temp_c) AS temp_n,
                   min(slowdown_temp_c - temp_c) AS min_headroom_c
               FROM gpu_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY gpu, node)
           SELECT s.gpu, s.node, coalesce(t.rack, '') AS rack, coalesce(t.idx, 0) AS idx,
               max(s.max_temp_c) AS max_temp_c, sum(s.temp_sum) / nullif(sum(s.temp_n), 0) AS temp_c,
               min(s.min_headroom_c) AS min_headroom_c
           FROM s LEFT JOIN topology t ON t.component = s.gpu GROUP BY 1, 2, 3, 4 ORDER BY 3, 2, 4""",
        [period.start_ts_s, period.end_ts_s],
    )


# SwPowerCap alone while the limit is the GPU's maximum: a GPU drawing its full power (routine in training, as
# on H100s and H200s at 700 W), not a throttle anyone set: counted apart (`routine_power_cap_s`), never as a bar.
_ROUTINE_CAP = f"clocks_event_reasons & {THROTTLE} = {SW_POWER_CAP} AND coalesce(power_limit_w >= power_limit_max_w, false)"


def throttle_by_reason(store: Store, period: Period, interval_s: float) -> list[Row]:
    """Per throttle reason (nvmlClocksEventReason* bits): GPU-seconds throttled and the GPUs it touched, routine
    full-limit SwPowerCap and SwPowerCap at a limit the product set left out (`routine_power_cap`,
    `intended.intended_power_cap`). One pass over the throttled samples grouped by
    GPU, a FILTER per reason, then summed."""
    register_limits(store)  # SwPowerCap at a limit the product set is not throttling either (intended.py)
    bits = [(bit, name) for bit, name in NAMES.items() if bit & THROTTLE]
    per_gpu = ", ".join(
        f"count(*) FILTER (WHERE clocks_event_reasons & {bit} != 0"
        + (f" AND NOT ({_ROUTINE_CAP}) AND NOT ({INTENDED_CAP})" if bit == SW_POWER_CAP else "")
        + f") AS r{i}"
        for i, (bit, _) in enumerate(bits)
    )
    totals = ", ".join(
        f"coalesce(sum(r{i}), 0) AS n{i}, count(*) FILTER (WHERE r{i} > 0) AS g{i}" for i in range(len(bits))
    )
    row = store.query(
        f"""WITH g AS (SELECT gpu, {per_gpu} FROM gpu_samples
               WHERE ts_s >= ? AND ts_s < ? AND clocks_event_reasons & {THROTTLE} != 0 GROUP BY gpu)
           SELECT {totals} FROM g""",
        [period.start_ts_s, period.end_ts_s],
    )[0]
    rows: list[Row] = [
        {"reason": name, "gpu_s": int(row[f"n{i}"]) * interval_s, "gpus": int(row[f"g{i}"])}
        for i, (_, name) in enumerate(bits)
    ]
    return sorted((r for r in rows if r["gpu_s"]), key=lambda r: -float(r["gpu_s"]))


def routine_power_cap(store: Store, period: Period, interval_s: float) -> Row:
    """GPU-seconds of SwPowerCap alone at the GPU's maximum limit, and how many GPUs: one summary line."""
    row = store.query(
        f"""SELECT count(*) AS n, count(DISTINCT gpu) AS gpus FROM gpu_samples
           WHERE ts_s >= ? AND ts_s < ? AND {_ROUTINE_CAP}""",
        [period.start_ts_s, period.end_ts_s],
    )[0]
    return {"gpu_s": int(row["n"]) * interval_s, "gpus": int(row["gpus"])}


def energy_kwh(store: Store, period: Period, interval_s: float) -> float:
    value = store.scalar(
        "SELECT sum(power_w) FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?",
        [period.start_ts_s, period.end_ts_s],
    )
    return float(value or 0.0) * interval_s / 3.6e6


def power_capping(store: Store, period: Period, interval_s: float) -> Row:
    """GPU-seconds at the software power cap, GPUs that drew within 2 % of their limit, DCIM signals."""
    rows = store.query(
        """WITH g AS (
               SELECT count(*) FILTER (WHERE clocks_event_reasons & 4 != 0) AS capped,
                   bool_or(power_w >= 0.98 * power_limit_w) AS at_limit,
                   max(power_w / nullif(power_limit_w, 0)) AS max_draw_share
               FROM gpu_samples WHERE ts_s >= ? AND ts_s < ? GROUP BY gpu)
           SELECT coalesce(sum(capped), 0) * ? AS capped_gpu_s, count(*) FILTER (WHERE at_limit) AS gpus_at_limit,
               max(max_draw_share) AS max_draw_share
           FROM g""",
        [period.start_ts_s, period.end_ts_s, interval_s],
    )
    signals = store.query(
        "SELECT kind, count(*) AS n FROM dcim_signals WHERE ts_s >= ? AND ts_s < ? GROUP BY 1 ORDER BY 1",
        [period.start_ts_s, period.end_ts_s],
    )
    return {**rows[0], "dcim_signals": {r["kind"]: int(r["n"]) for r in signals}}


def rack_power(store: Store, period: Period) -> list[Row]:
    """Per rack: mean and peak power (kW) against its DCIM cap, and time under a cap. The cap in force at each
    sample is the DCIM input's (`dcim_signals`: the rack's newest signal, else the fleet's; a `clear` ends it),
    or a cap the rack itself reported (`rack_samples.power_cap_kw`, which no simulated rack writes)."""
    return store.query(
        """WITH sig AS (SELECT scope, ts_s, CASE WHEN kind = 'cap' THEN budget_kw END AS cap_kw FROM dcim_signals),
                s AS (SELECT r.rack, r.power_kw, coalesce(r.power_cap_kw, rc.cap_kw, fc.cap_kw) AS cap_kw
                      FROM rack_samples r
                      ASOF LEFT JOIN sig rc ON rc.scope = r.rack AND r.ts_s >= rc.ts_s
                      ASOF LEFT JOIN sig fc ON fc.scope = 'fleet' AND r.ts_s >= fc.ts_s
                      WHERE r.ts_s >= ? AND r.ts_s < ?)
           SELECT rack, avg(power_kw) AS power_kw, max(power_kw) AS max_power_kw,
                  min(cap_kw) AS min_cap_kw, count(cap_kw) AS capped_samples, count(*) AS samples
           FROM s GROUP BY 1 ORDER BY 1""",
        [period.start_ts_s, period.end_ts_s],
    )


def coverage(store: Store, period: Period) -> list[Row]:
    """Per telemetry table: rows in the period, first and last timestamp."""
    parts = [
        f"SELECT '{table}' AS source, count(*) AS rows, min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s "
        f'FROM "{table}" WHERE ts_s >= $1 AND ts_s < $2'
        for table in TIME_SERIES_TABLES
        if table != "collector_errors"
    ]
    return store.query(" UNION ALL ".join(parts), [period.start_ts_s, period.end_ts_s])


def data_range(store: Store) -> Row | None:
    """The oldest and newest GPU sample of the whole workspace (where to ask a report for), or None."""
    rows = store.query("SELECT min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s FROM gpu_samples")
    return rows[0] if rows and rows[0]["last_ts_s"] is not None else None


def gaps(store: Store, period: Period, interval_s: float) -> list[Row]:
    """Gaps in fleet GPU telemetry (no GPU reported) longer than three sample intervals: from when, how long.
    The window runs over the distinct timestamps (one per sample time), not over every GPU's rows."""
    return store.query(
        """SELECT prev_ts_s AS from_ts_s, ts_s - prev_ts_s AS gap_s FROM (
               SELECT ts_s, lag(ts_s) OVER (ORDER BY ts_s) AS prev_ts_s
               FROM (SELECT DISTINCT ts_s FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?))
           WHERE ts_s - prev_ts_s > ? ORDER BY gap_s DESC LIMIT 20""",
        [period.start_ts_s, period.end_ts_s, 3 * interval_s],
    )


def gpus_missing(store: Store, period: Period) -> list[Row]:
    """GPUs that reported at fewer than 95 % of the fleet's sample times (or answered with an NVML error)."""
    return store.query(
        """WITH fleet AS (SELECT count(*) AS times FROM (
               SELECT ts_s FROM gpu_samples WHERE ts_s >= $1 AND ts_s < $2 GROUP BY ts_s))
           SELECT gpu, count(*) FILTER (WHERE nvml_error IS NULL) AS samples, any_value(fleet.times) AS times,
               count(nvml_error) AS errors
           FROM gpu_samples, fleet WHERE ts_s >= $1 AND ts_s < $2 GROUP BY gpu
           HAVING count(*) FILTER (WHERE nvml_error IS NULL) < 0.95 * any_value(fleet.times)
           ORDER BY samples LIMIT 20""",
        [period.start_ts_s, period.end_ts_s],
    )


def collector_errors(store: Store, period: Period) -> list[Row]:
    return store.query(
        """SELECT collector, error, count(*) AS n, max(ts_s) AS last_ts_s FROM collector_errors
           WHERE ts_s >= ? AND ts_s < ? GROUP BY 1, 2 ORDER BY n DESC LIMIT 20""",
        [period.start_ts_s, period.end_ts_s],
    )
