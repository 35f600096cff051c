"""What the lanes datapath is set to: each lane's HTB rate and ceil and its ECN budget.

The control laws (aiops.control.laws) compute these; `aiops.datapath.lanes.actuate_rates` writes them.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiops.datapath.policy import LANES, LaneName


@dataclass(frozen=True)
class LaneRates:
    rate_mbps: dict[LaneName, float]  # HTB rate: guaranteed
    ceil_mbps: dict[LaneName, float]  # HTB ceil: most it may borrow
    ecn_budget_mbps: dict[LaneName, float]  # BPF virtual-queue rate above which packets are CE-marked

    def differs(self, other: LaneRates, deadband: float = 0.05) -> bool:
        """True when any value moved by more than `deadband` (relative): avoids churning tc every tick."""
        for lane in LANES:
            for mine, theirs in (
                (self.rate_mbps[lane], other.rate_mbps[lane]),
                (self.ceil_mbps[lane], other.ceil_mbps[lane]),
            ):
                if abs(mine - theirs) > deadband * max(abs(theirs), 1e-9):
                    return True
        return False
