"""Power limits lowered in an incident's window, as lowerings: each GPU's limit steps (one row per level it held,
dated by its first sample at that level), grouped per node by when they happened, each judged against the DCIM
caps in force (issue 40).

A lowering is one command or one script run: the GPUs of a node whose limits came down within `DROPS_APART_S`
of each other. Two lowerings minutes apart on one node are two causes, even on the same GPU (its limit lowered
again); a lowering keeps its time (`from_ts_s`), so ranking can tell which incident its onset opened. A DCIM
cap explains a lowering inside the capped rack (any rack when the topology is unknown), from the cap's start
on, and only down to the level the cap brought its rack to (`cap_levels`: the upper quartile of the rack's GPU
limits; a power manager shares a rack's budget out as limits of one level): a limit lowered below that, before
or after the cap, is somebody's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiops.rca.facts import Facts
from guardrails.intended import Intended

DROPS_APART_S = 20.0  # limits lowered further apart than this on one node are two lowerings (two windows)
BELOW_CAP = 0.9  # a limit under 90 % of the level a DCIM cap brought its rack to is not the cap's
LOWERED = 0.85  # a limit under 85 % of the GPU's reference (its maximum, its limit before) is lowered
CAP_SLACK_S = 10.0  # a cap that began this long after a lowering still explains it (one window)


@dataclass(frozen=True)
class Lowering:
    node: str
    limits_w: dict[str, float]  # GPU -> the limit it was lowered to
    from_ts_s: float  # when (the first sample at the lowered level; the window's start when before it)
    before_window: bool  # lowered before the window began (its time is not known here)
    covering: tuple[str, ...]  # the capped racks whose cap explains it; empty when none does

    @property
    def gpus(self) -> list[str]:
        return sorted(self.limits_w)


def limit_steps(facts: Facts) -> list[dict[str, Any]]:
    """Per GPU, each power limit it held in the window and since when (its first sample at it)."""
    w = facts.window
    return facts.run(
        "limit_steps",
        "Each GPU's power-limit steps in the window: the limit and its first sample at it",
        """SELECT gpu, any_value(node) AS node, power_limit_w AS limit_w, min(ts_s) AS from_ts_s,
                  max(power_limit_max_w) AS max_limit_w
           FROM gpu_samples WHERE ts_s BETWEEN ? AND ? AND power_limit_w IS NOT NULL
           GROUP BY gpu, power_limit_w ORDER BY from_ts_s, gpu""",
        [w.start_s, w.end_s],
    )


def cap_levels(
    changes: Mapping[str, Mapping[str, Any]], capped_racks: set[str], rack_of: Mapping[str, str]
) -> dict[str, float | None]:
    """Capped rack -> the level its cap brought the rack's GPU limits to: the upper quartile of their lowest
    limits in the window (a few GPUs lowered further do not move it); None where the rack's GPUs are unknown.
    Without a topology every GPU counts for every capped rack."""
    out: dict[str, float | None] = {}
    for rack in capped_racks:
        limits = sorted(
            float(r["limit_w"])
            for r in changes.values()
            if r["limit_w"] is not None and (not rack_of or rack_of.get(str(r["node"])) == rack)
        )
        out[rack] = limits[min(len(limits) - 1, (3 * len(limits)) // 4)] if limits else None
    return out


def lowerings(
    facts: Facts,
    reference_w: Mapping[str, float],
    intended: Mapping[tuple[str, str], Intended],
    racks: Mapping[str, Mapping[str, Any]],
    levels: Mapping[str, float | None],
) -> list[Lowering]:
    """The window's lowerings, earliest first: steps below `LOWERED` of the GPU's reference, not the limit an
    executed action set (intended state), grouped per node by time, each with the caps that explain it."""
    start_s = facts.window.start_s
    steps = []
    for r in limit_steps(facts):
        gpu, limit_w = str(r["gpu"]), float(r["limit_w"])
        reference = reference_w.get(gpu, 0.0)
        if not reference or limit_w >= LOWERED * reference:
            continue
        set_here = intended.get((gpu, "power_limit_w"))
        if set_here is not None and set_here.matches(limit_w):
            continue  # the limit an executed action set: expected, not a misconfiguration
        steps.append((str(r["node"]), float(r["from_ts_s"]), gpu, limit_w))
    out: list[Lowering] = []
    current: dict[str, tuple[float, dict[str, float]]] = {}
    groups: list[tuple[str, float, dict[str, float]]] = []
    for node, from_ts_s, gpu, limit_w in sorted(steps, key=lambda s: (s[1], s[2])):
        seen = current.get(node)
        if seen is not None and from_ts_s - seen[0] <= DROPS_APART_S:
            seen[1][gpu] = min(limit_w, seen[1].get(gpu, limit_w))
            continue
        limits = {gpu: limit_w}
        current[node] = (from_ts_s, limits)
        groups.append((node, from_ts_s, limits))
    rack_of = facts.racks_of_nodes()
    for node, from_ts_s, limits in groups:
        covering = tuple(_covering(node, from_ts_s, limits, racks, levels, rack_of))
        out.append(Lowering(node, limits, from_ts_s, from_ts_s <= start_s + 1.0, covering))
    return out


def _covering(
    node: str,
    from_ts_s: float,
    limits_w: Mapping[str, float],
    racks: Mapping[str, Mapping[str, Any]],
    levels: Mapping[str, float | None],
    rack_of: Mapping[str, str],
) -> list[str]:
    """The capped racks over `node` whose cap began before the lowering (`CAP_SLACK_S`) and whose level no
    lowered limit is below (`BELOW_CAP`)."""
    rack = rack_of.get(node)
    out = []
    for cap, level_w in sorted(levels.items()):
        began = racks[cap].get("cap_from_ts_s")
        inside = rack is None or cap == rack
        in_time = began is None or float(began) <= from_ts_s + CAP_SLACK_S
        below = level_w is not None and any(v < BELOW_CAP * level_w for v in limits_w.values())
        if inside and in_time and not below:
            out.append(cap)
    return out
