"""Injected faults as time-varying modifiers of the simulated world. Nothing here is ever emitted as telemetry:
collectors see only the physical consequences (temperatures, counters, XIDs, lanes, latencies)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from aiops.scenarios import FaultSpec


@dataclass
class ActiveFault:
    spec: FaultSpec
    gpus: np.ndarray
    racks: np.ndarray
    nic: int | None
    node: int | None
    xid: int | None = None  # the XID an application error reports, picked by seed
    started: bool = False
    ended: bool = False
    next_event_s: float = 0.0
    flap_down_until_s: float = -1.0
    state: dict[str, float] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def severity(self) -> float:
        return self.spec.severity

    def active(self, elapsed_s: float) -> bool:
        end = self.spec.start_s + self.spec.duration_s if self.spec.duration_s is not None else float("inf")
        return self.spec.start_s <= elapsed_s < end

    def progress(self, elapsed_s: float, ramp_s: float) -> float:
        """0 → 1 over `ramp_s` after the start."""
        return float(min(1.0, max(0.0, (elapsed_s - self.spec.start_s) / ramp_s)))
