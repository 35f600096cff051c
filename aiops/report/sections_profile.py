"""The "Host code during GPU idle" section: the AI flame graph runs of the period (profile_runs, written by
`aiops profile --db` and the service's incident trigger) and their heaviest stacks per view, with shares.

A stack's share is its weight over the view's total across the period's runs. Only each run's top stacks are
stored, but every stored row carries its run's view total (weight / share), so the total is exact: the sum of
those totals over the runs that have the view. Stack names are data from profiled binaries: cleaned here,
escaped by each renderer. A run's "probes counted" is the share of its time the probes counted (migration 15):
below 100 % its calls and blocked time are scaled estimates.
"""

from __future__ import annotations

from aiops.report.model import Section
from aiops.report.period import Period
from aiops.report.queries import Row
from aiops.report.sections import _t
from aiops.report.text import num, utc
from aiops.store import Store

VIEWS: tuple[tuple[str, str, str], ...] = (
    ("idle", "on-CPU stacks while the GPU was idle", "samples"),
    ("blocked", "stacks blocked in synchronising CUDA/NCCL calls", "us"),
    ("launch", "stacks that fed the GPU (launches, copies, collectives)", "calls"),
)
TOP_STACKS = 5
MAX_RUNS_SHOWN = 20
SHOWN_FRAMES = 6  # the leaf-most frames of a stack; the root end is elided


def top_stacks(store: Store, period: Period, limit: int = TOP_STACKS) -> list[Row]:
    """Per view, the heaviest stacks of the period's runs: view, stack, leaf, weight, runs, share."""
    return store.query(
        """
        WITH runs AS (SELECT run_id FROM profile_runs WHERE ts_s >= ? AND ts_s < ?),
        rows AS (SELECT s.* FROM profile_stacks s JOIN runs USING (run_id) WHERE s.weight > 0 AND s.share > 0),
        totals AS (
            SELECT view, sum(total) AS total
            FROM (SELECT run_id, view, max(weight / share) AS total FROM rows GROUP BY run_id, view)
            GROUP BY view
        ),
        stacks AS (
            SELECT r.view, r.stack, any_value(r.leaf) AS leaf, sum(r.weight) AS weight,
                   count(DISTINCT r.run_id) AS runs, sum(r.weight) / any_value(t.total) AS share
            FROM rows r JOIN totals t USING (view)
            GROUP BY r.view, r.stack
        )
        SELECT * FROM stacks
        QUALIFY row_number() OVER (PARTITION BY view ORDER BY weight DESC, stack) <= ?
        ORDER BY view, weight DESC, stack
        """,
        [period.start_ts_s, period.end_ts_s, limit],
    )


def runs(store: Store, period: Period) -> list[Row]:
    return store.query(
        "SELECT * FROM profile_runs WHERE ts_s >= ? AND ts_s < ? ORDER BY ts_s DESC, run_id LIMIT ?",
        [period.start_ts_s, period.end_ts_s, MAX_RUNS_SHOWN],
    )


def short_stack(stack: str, frames: int = SHOWN_FRAMES) -> str:
    parts = stack.split(";")
    return stack if len(parts) <= frames else "...;" + ";".join(parts[-frames:])


def counted(duty: object, scaled: object) -> str:
    """How much of a run the probes counted (migration 15): `100%`, `4.0%, scaled`; `-` for a run stored before
    the fraction was recorded."""
    if not isinstance(duty, int | float):
        return "-"
    return f"{100 * duty:.1f}%, scaled" if scaled else f"{100 * duty:.0f}%"


def profile(store: Store, period: Period) -> Section | None:
    count = int(
        store.scalar(
            "SELECT count(*) FROM profile_runs WHERE ts_s >= ? AND ts_s < ?",
            [period.start_ts_s, period.end_ts_s],
        )
        or 0
    )
    if not count:
        return None
    section = Section("profile", "Host code during GPU idle")
    shown = f" (the {MAX_RUNS_SHOWN} newest are listed)" if count > MAX_RUNS_SHOWN else ""
    section.lines.append(
        f"{count} profiling run{'s' if count != 1 else ''} of CUDA processes (AI flame graphs: eBPF uprobes on "
        f"the CUDA runtime, driver and NCCL, joined with GPU utilisation){shown}. Shares are of each view's "
        "total over the period's runs; stacks are folded, root first, the root end elided past "
        f"{SHOWN_FRAMES} frames."
    )
    by_view: dict[str, list[Row]] = {}
    for row in top_stacks(store, period):
        by_view.setdefault(str(row["view"]), []).append(row)
    for view, caption, unit in VIEWS:
        rows = by_view.get(view)
        if not rows:
            section.lines.append(f"No {view} stacks recorded ({caption}).")
            continue
        section.tables.append(
            _t(
                f"Top {caption} ({unit})",
                ("stack", "leaf", unit, "share", "runs"),
                [
                    (
                        short_stack(str(r["stack"])),
                        r["leaf"],
                        f"{int(r['weight']):,}",
                        f"{100 * r['share']:.1f}%",
                        r["runs"],
                    )
                    for r in rows
                ],
            )
        )
    section.tables.append(
        _t(
            "Profiling runs",
            (
                "started",
                "node",
                "pid",
                "duration",
                "GPU idle slices",
                "GPU util mean",
                "calls",
                "blocked",
                "probes counted",
            ),
            [
                (
                    utc(r["ts_s"]),
                    r["node"],
                    r["pid"],
                    f"{num(r['duration_s'])} s",
                    f"{r['idle_slices']}/{r['slices']}",
                    "-" if r["gpu_util_mean_pct"] is None else f"{num(r['gpu_util_mean_pct'])}%",
                    f"{int(r['calls']):,}",
                    f"{num(r['blocked_us'] / 1e6, ',.3f')} s",
                    counted(r["probe_duty"], r["scaled"]),
                )
                for r in runs(store, period)
            ],
        )
    )
    return section
