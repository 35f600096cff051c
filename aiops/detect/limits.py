"""Power-limit drops, each dated by its own onset and judged against the DCIM cap in force when it happened.

A GPU's enforced power limit moves in steps: someone (an operator, a script, a DCIM-driven power manager) sets a
new value and it stays. `LimitSteps` keeps each GPU's steps: a drop below `DROP` of the level it had opens a
new step, dated by the window it was first seen in (`since_ts_s`), so a second drop minutes after a first one (a
cap, then a misconfiguration on the same GPU) is a new onset, not a continuation of the first; a rise back to an
earlier level returns to that level's step (its onset stays the one it had).

A drop inside a scope a DCIM signal capped is judged against the cap at the time of the drop: did it go below
what the cap asked? What the cap asked is read from the capped scope itself, the level its GPUs' limits were
brought to (`cap_level_w`: the upper quartile of their limits, so a few GPUs lowered further do not move it);
a power manager shares a rack's budget out as per-GPU limits of one level. A drop to that level is the cap's
doing (`cap: "at"`); one well below it (`cap: "below"`, under `DROP` of the level) is not, whatever the cap:
a limit somebody lowered inside a capped rack. `aiops.causal.symptom_labels` reads the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

DROP = 0.9  # a limit under 90 % of its previous level is a new, lower step (NVML limits move in set steps)


@dataclass(frozen=True)
class Step:
    limit_w: float
    since_ts_s: float  # the window the step was first seen in
    was_w: float  # the level before it
    cap: str | None = None  # "at" | "below" a DCIM cap in force at the drop, None without one
    cap_scope: str | None = None
    cap_level_w: float | None = None

    def detail(self) -> dict[str, Any]:
        out: dict[str, Any] = {"since_ts_s": self.since_ts_s, "step_from_w": self.was_w}
        if self.cap is not None:
            out.update(cap=self.cap, cap_scope=self.cap_scope, cap_level_w=self.cap_level_w)
        return out


class LimitSteps:
    """Each GPU's power-limit steps, its first seen limit at the bottom."""

    def __init__(self) -> None:
        self.steps: dict[str, list[Step]] = {}

    def first_w(self, gpu: str) -> float | None:
        steps = self.steps.get(gpu)
        return steps[0].limit_w if steps else None

    def update(
        self, gpu: str, limit_w: float, ts_s: float, cap: tuple[str, float] | None = None
    ) -> Step | None:
        """Record the GPU's limit in the window ending at `ts_s` (`cap`: the capped scope over it and the level
        its GPUs were brought to, when a DCIM cap is in force); the step it is on when that is a lowered one
        (below `DROP` of the first limit), else None."""
        steps = self.steps.setdefault(gpu, [Step(limit_w, ts_s, limit_w)])
        while len(steps) > 1 and limit_w > steps[-1].limit_w / DROP:
            steps.pop()  # raised back above this step
        top = steps[-1]
        if limit_w < DROP * top.limit_w:
            steps.append(_judged(Step(limit_w, ts_s, top.limit_w), cap))
        return steps[-1] if len(steps) > 1 else None


def _judged(step: Step, cap: tuple[str, float] | None) -> Step:
    if cap is None:
        return step
    scope, level_w = cap
    verdict = "below" if step.limit_w < DROP * level_w else "at"
    return Step(step.limit_w, step.since_ts_s, step.was_w, verdict, scope, round(level_w, 1))


def cap_levels(
    limits_w: Mapping[str, float], capped: Sequence[str], rack_of_gpu: Mapping[str, str | None]
) -> dict[str, tuple[str, float]]:
    """GPU -> (the capped scope over it, the level the cap brought that scope's limits to). `capped`: the
    racks (or `fleet`) a DCIM cap is in force on; a GPU of unknown rack is under a fleet cap only."""
    if not capped:
        return {}
    members: dict[str, list[str]] = {}
    for gpu in limits_w:
        rack = rack_of_gpu.get(gpu)
        scope = rack if rack is not None and rack in capped else "fleet" if "fleet" in capped else None
        if scope is not None:
            members.setdefault(scope, []).append(gpu)
    out: dict[str, tuple[str, float]] = {}
    for scope, gpus in members.items():
        level_w = _upper_quartile([limits_w[g] for g in gpus])
        out.update((g, (scope, level_w)) for g in gpus)
    return out


def _upper_quartile(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, (3 * len(ordered)) // 4)]
