"""Writing a ProfileResult to a directory: <view>.folded, profile.speedscope.json, flamegraph.svg and
summary.json (what ran, per-view totals, the top stacks during GPU idle and by blocked time)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from aiops.profile.flamegraph import flamegraph_svg
from aiops.profile.folded import VIEWS, folded_text, view_weights
from aiops.profile.session import ProfileResult
from aiops.profile.speedscope import speedscope_document

TOP_STACKS = 10


def all_views(result: ProfileResult) -> dict[str, Counter[tuple[str, ...]]]:
    return {view: view_weights(result.records, view) for view in VIEWS}


def _top(weights: Counter[tuple[str, ...]]) -> list[dict[str, Any]]:
    return [{"stack": list(frames), "weight": weight} for frames, weight in weights.most_common(TOP_STACKS)]


def summary(result: ProfileResult) -> dict[str, Any]:
    views = all_views(result)
    known = [pct for pct in result.util_pct if pct is not None]
    return {
        "pid": result.pid,
        "duration_s": round(result.duration_s, 3),
        "slice_s": result.slice_s,
        "slices": len(result.util_pct),
        "idle_slices": result.idle_slices,
        "gpu_util_mean_pct": round(sum(known) / len(known), 1) if known else None,
        "probes": list(result.probes),
        "libraries": result.libraries,
        "target_exited": result.target_exited,
        "unwalked_calls": result.unwalked_calls,
        "sampling": {
            "duty": result.duty,
            "period_s": round(result.period_s, 3),
            "probed_s": round(result.probed_s, 3),
            "probe_fraction": round(result.probe_fraction, 4),
            "windows": result.windows,
            "observed_calls": result.observed_calls,
            "scaled": result.probe_fraction < 1,
        },
        "totals": {
            view: {"value": sum(weights.values()), "unit": VIEWS[view]} for view, weights in views.items()
        },
        "top_idle_stacks": _top(views["idle"]),
        "top_blocked_stacks": _top(views["blocked"]),
        "top_launch_stacks": _top(views["launch"]),
    }


def write_outputs(result: ProfileResult, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    views = all_views(result)
    written: dict[str, Path] = {}
    for view, weights in views.items():
        path = out_dir / f"{view}.folded"
        path.write_text(folded_text(weights))
        written[f"{view}.folded"] = path
    title = f"aiops profile: pid {result.pid}, {result.duration_s:.1f} s"
    speedscope = out_dir / "profile.speedscope.json"
    speedscope.write_text(json.dumps(speedscope_document(views, title)))
    svg = out_dir / "flamegraph.svg"
    svg.write_text(flamegraph_svg(views, title))
    summary_path = out_dir / "summary.json"
    summary_path.write_text(json.dumps(summary(result), indent=2))
    written.update({"speedscope": speedscope, "svg": svg, "summary": summary_path})
    return written
