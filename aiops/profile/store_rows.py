"""A profiling run's summary as rows of profile_runs and profile_stacks (migration 11): the top stacks during
GPU idle, by blocked time and by launches, so the analyst and reports can cite them. The run row says how much
of the run the probes counted and whether its counts were scaled (probe_duty, scaled: migration 15)."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from aiops.profile.folded import clean_frame
from aiops.profile.outputs import all_views
from aiops.profile.session import ProfileResult
from aiops.store import Store

STORED_VIEWS = ("idle", "blocked", "launch")
TOP_STACKS = 10


def _stack_rows(run_id: str, view: str, weights: Counter[tuple[str, ...]]) -> list[dict[str, Any]]:
    total = sum(weights.values())
    rows: list[dict[str, Any]] = []
    for rank, (frames, weight) in enumerate(weights.most_common(TOP_STACKS), start=1):
        names = [clean_frame(frame) for frame in frames] or ["[no frames]"]
        rows.append(
            {
                "run_id": run_id,
                "view": view,
                "rank": rank,
                "stack": ";".join(names),
                "leaf": names[-1],
                "weight": weight,
                "share": weight / total,
            }
        )
    return rows


def record_profile(store: Store, result: ProfileResult, node: str, started_ts_s: float | None = None) -> str:
    """Insert the run and its top stacks in one transaction; returns the run id."""
    ts_s = time.time() - result.duration_s if started_ts_s is None else started_ts_s
    run_id = f"prof-{result.pid}-{int(ts_s * 1000)}"
    views = all_views(result)
    known = [pct for pct in result.util_pct if pct is not None]
    run: dict[str, list[Any]] = {
        "run_id": [run_id],
        "ts_s": [ts_s],
        "node": [node],
        "pid": [result.pid],
        "duration_s": [result.duration_s],
        "slices": [len(result.util_pct)],
        "idle_slices": [result.idle_slices],
        "gpu_util_mean_pct": [sum(known) / len(known) if known else None],
        "probes": [",".join(result.probes)],
        "calls": [sum(views["calls"].values())],
        "blocked_us": [sum(views["blocked"].values())],
        "probe_duty": [result.probe_fraction],  # migration 15: the share of the run counted
        "scaled": [result.probe_fraction < 1],
    }
    rows = [row for view in STORED_VIEWS for row in _stack_rows(run_id, view, views[view])]
    batches: dict[str, dict[str, list[Any]]] = {"profile_runs": run}
    if rows:
        batches["profile_stacks"] = {column: [row[column] for row in rows] for column in rows[0]}
    store.ingest_many(batches)
    return run_id
