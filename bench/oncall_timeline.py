"""Where each fault's time went on the operator's day (the profile behind ETTR): from the fault's start, when the
product first opened an incident for it, when a plan first named it, when it paged, when a person signed its first step, when the first action
on it ran, when it stopped hurting (MTTM), and how long it hurt in all (the job's loss grows with it). A phase that
never came is None; the gaps say where the wait was: detection, the page, the person's delay, the plan, the step
that ran and did not help."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PHASES = ("detected", "planned", "paged", "signed", "acted")
EARLY_S = 30.0  # an incident opened this long before a fault may be its (sample clocks); earlier: another's


class Timeline:
    """The first time each phase came for each fault (elapsed seconds of the day). An incident opened well before
    the fault (another fault's, whose diagnosis later moved to this one) is not its detection: its plan is."""

    def __init__(self, faults: list[Any]) -> None:
        self.start_s = {f.index: float(f.start_s) for f in faults}
        self.first: dict[int, dict[str, float]] = defaultdict(dict)

    def saw(self, fault: int | None, phase: str, at_s: float) -> None:
        if fault is None or at_s < self.start_s.get(fault, 0.0) - EARLY_S:
            return
        known = self.first[fault].get(phase)
        if known is None or at_s < known:
            self.first[fault][phase] = at_s

    def row(self, fault: int, start_s: float, hurt_s: float) -> dict[str, Any]:
        """Each phase as seconds after the fault's start (None: never), and the seconds it hurt a job."""
        seen = self.first.get(fault, {})
        out: dict[str, Any] = {
            f"{phase}_after_s": (round(seen[phase] - start_s, 1) if phase in seen else None)
            for phase in PHASES
        }
        out["hurt_s"] = round(hurt_s, 1)
        return out


def hurt_by_nature(faults: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Seconds hurt and faults, per nature (repair, remedy, transient, oneshot): which kind of fault the jobs'
    lost time came from."""
    out: dict[str, dict[str, float]] = {}
    for f in faults:
        one = out.setdefault(str(f["nature"]), {"faults": 0, "hurt_s": 0.0})
        one["faults"] += 1
        one["hurt_s"] = round(one["hurt_s"] + float(f["timeline"]["hurt_s"]), 1)
    return out


__all__ = ["PHASES", "Timeline", "hurt_by_nature"]
