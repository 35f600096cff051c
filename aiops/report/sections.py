"""One function per report section: each returns None when its data does not exist in the period, else a
Section with the numbers behind it (tables) and its plots."""

from __future__ import annotations

from collections.abc import Sequence

from aiops.report import intended, plots
from aiops.report import queries as q
from aiops.report.model import Section, Table
from aiops.report.period import Period
from aiops.report.text import clean, num
from aiops.store import Store


def _t(caption: str, headers: tuple[str, ...], rows: Sequence[Sequence[object]]) -> Table:
    return Table(caption, headers, tuple(tuple(clean(c) for c in row) for row in rows))


def _trend(now: object, before: object, unit: str, fmt: str = ",.1f") -> str:
    if now is None:
        return "-"
    if before is None:
        return f"{num(now, fmt)} {unit} (no data in the previous period)"
    delta = float(now) - float(before)  # type: ignore[arg-type]
    return (
        f"{num(now, fmt)} {unit} ({'+' if delta >= 0 else ''}{num(delta, fmt)} against the previous period)"
    )


def summary(store: Store, period: Period, interval_s: float, series: list[q.Row]) -> Section:
    """series: `queries.gpu_series` of the period (computed once for this section and power's)."""
    now = q.fleet_summary(store, period)
    before = q.fleet_summary(store, period.previous())
    b = before if before["samples"] else {k: None for k in before}
    section = Section("summary", "Fleet health summary")
    section.lines.append(
        f"{int(now['gpus'])} GPUs reported {int(now['samples']):,} samples (about one every {interval_s:g} s)."
    )
    rows = [
        ("mean GPU utilisation", _trend(now["util_pct"], b["util_pct"], "%")),
        ("mean GPU temperature", _trend(now["temp_c"], b["temp_c"], "°C")),
        ("hottest GPU sample", _trend(now["max_temp_c"], b["max_temp_c"], "°C")),
        ("mean GPU power", _trend(now["power_w"], b["power_w"], "W")),
        (
            "samples throttled",
            _trend(
                100 * now["throttled_share"],
                None if b["throttled_share"] is None else 100 * b["throttled_share"],
                "%",
                ".2f",
            ),
        ),
        ("NVML errors (samples)", _trend(now["nvml_errors"], b["nvml_errors"], "", ",.0f")),
    ]
    section.tables.append(
        _t(
            "Fleet figures, this period against the previous period of the same length",
            ("figure", "value"),
            rows,
        )
    )  # type: ignore[arg-type]
    if len(series) > 1:
        ts = [r["ts_s"] for r in series]
        section.plots.append(
            plots.time_series(
                "temperature",
                "GPU temperature",
                "temperature (°C)",
                ts,
                {"mean": [r["temp_c"] for r in series], "max": [r["max_temp_c"] for r in series]},
                min_span=10.0,
            )
        )
        section.plots.append(
            plots.time_series(
                "utilisation",
                "Mean GPU utilisation",
                "utilisation (%)",
                ts,
                {"mean": [r["util_pct"] for r in series]},
                y_limits=(0.0, 100.0),
            )
        )
    return section


def thermal(store: Store, period: Period, interval_s: float) -> Section | None:
    gpus = q.gpu_thermal(store, period)
    if not gpus:
        return None
    section = Section("thermal", "Temperature, headroom and throttling")
    nodes = sorted({r["node"] for r in gpus}, key=lambda n: (len(n), n))
    idxs = sorted({int(r["idx"]) for r in gpus})
    by_key = {(r["node"], int(r["idx"])): r for r in gpus}
    grid_max = [[by_key[(n, i)]["max_temp_c"] if (n, i) in by_key else None for i in idxs] for n in nodes]
    grid_head = [
        [by_key[(n, i)]["min_headroom_c"] if (n, i) in by_key else None for i in idxs] for n in nodes
    ]
    cols = [str(i) for i in idxs]
    section.plots.append(
        plots.heatmap("heat-max", "Peak GPU temperature per node and GPU", "°C", nodes, cols, grid_max)
    )
    if any(v is not None for row in grid_head for v in row):
        section.plots.append(
            plots.heatmap(
                "heat-headroom",
                "Least headroom to the slowdown temperature",
                "°C below slowdown",
                nodes,
                cols,
                grid_head,
                reverse=True,
            )
        )
    hottest = sorted(gpus, key=lambda r: -(r["max_temp_c"] or 0))[:5]
    section.tables.append(
        _t(
            "Hottest GPUs",
            ("GPU", "rack", "peak °C", "mean °C", "least headroom °C"),
            [
                (r["gpu"], r["rack"], num(r["max_temp_c"]), num(r["temp_c"]), num(r["min_headroom_c"]))
                for r in hottest
            ],
        )
    )
    reasons = q.throttle_by_reason(store, period, interval_s)
    routine = q.routine_power_cap(store, period, interval_s)
    if routine["gpu_s"]:
        section.lines.append(
            f"Routine: {num(routine['gpu_s'] / 3600, ',.2f')} GPU-hours of SwPowerCap alone at the full power limit "
            f"on {routine['gpus']} GPUs (drawing their maximum power, no limit set below it): not counted as throttling."
        )
    ours = intended.intended_power_cap(store, period, interval_s)
    if ours["gpu_s"]:
        section.lines.append(
            f"Set by the service: {num(ours['gpu_s'] / 3600, ',.2f')} GPU-hours of SwPowerCap alone at a power limit "
            f"an executed action set ({', '.join(ours['proposals'][:4])}) on {ours['gpus']} GPUs: intended, not "
            "counted as throttling."
        )
    if reasons:
        section.tables.append(
            _t(
                "Throttle time by reason",
                ("reason", "GPU-hours", "GPUs"),
                [(r["reason"], num(r["gpu_s"] / 3600, ",.2f"), r["gpus"]) for r in reasons],
            )
        )
        section.plots.append(
            plots.bars(
                "throttle",
                "Throttle time by reason",
                "GPU-hours",
                [r["reason"] for r in reasons],
                [r["gpu_s"] / 3600 for r in reasons],
            )
        )
    else:
        section.lines.append(
            "No GPU was throttled in the period"
            + (
                " beyond that routine capping."
                if routine["gpu_s"] or ours["gpu_s"]
                else ": no sample carried a throttle reason."
            )
        )
    return section


def power(store: Store, period: Period, interval_s: float, series: list[q.Row]) -> Section | None:
    """series: `queries.gpu_series` of the period, as for the summary."""
    if not series:
        return None
    section = Section("power", "Power")
    energy = q.energy_kwh(store, period, interval_s)
    capping = q.power_capping(store, period, interval_s)
    section.lines.append(f"GPU energy in the period: {energy:,.1f} kWh.")
    signals = ", ".join(f"{k}: {v}" for k, v in capping["dcim_signals"].items()) or "none"
    section.tables.append(
        _t(
            "Power capping",
            ("figure", "value"),
            [
                ("GPU-hours at the software power cap", num((capping["capped_gpu_s"] or 0) / 3600, ",.2f")),
                ("GPUs that drew within 2 % of their limit", capping["gpus_at_limit"]),
                ("highest draw / limit", num(100 * (capping["max_draw_share"] or 0)) + " %"),
                ("DCIM signals in the period", signals),
            ],
        )
    )
    ts = [r["ts_s"] for r in series]
    section.plots.append(
        plots.time_series(
            "power",
            "Fleet GPU power against the enforced limits",
            "power (kW)",
            ts,
            {
                "draw": [(r["power_w"] or 0) / 1000 for r in series],
                "limit": [(r["power_limit_w"] or 0) / 1000 for r in series],
            },
            min_span=1.0,
        )
    )
    racks = q.rack_power(store, period)
    if racks:
        section.tables.append(
            _t(
                "Rack power against DCIM caps",
                ("rack", "mean kW", "peak kW", "lowest cap kW", "time under a cap"),
                [
                    (
                        r["rack"],
                        num(r["power_kw"]),
                        num(r["max_power_kw"]),
                        num(r["min_cap_kw"]),
                        f"{100 * r['capped_samples'] / max(r['samples'], 1):.1f} %",
                    )
                    for r in racks
                ],
            )
        )
    return section
