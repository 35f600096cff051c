"""The traffic controller of the twin: the shaping law of aiops/control/laws.py, run per NIC every step.

Each step the controller sees what a real one measures, the previous step's VIP (collective) demand per NIC,
and the jobs' checkpoint schedule (a checkpoint due within `adaptive.forecast_lead_s` shrinks bulk's ceiling
beforehand), and keeps each lane's HTB ceil as a fraction of the link (what the twin's egress model and its
`lane_rate_bps` use, as the eBPF telemetry reports a lane's ceil). The policy's rates are in
Mbps of its `link_mbps`; the twin applies them as fractions of its own NICs' link (network.LINK_BPS).
"""

from __future__ import annotations

import numpy as np

from aiops.control.laws import initial_rates, shape_many
from aiops.datapath.policy import LANES, Policy
from aiops.sim.topology import F64, Bools, all_true, any_true


class TwinLaneController:
    def __init__(self, policy: Policy, nic_count: int) -> None:
        self.policy = policy
        first = initial_rates(policy)
        link = policy.link_mbps
        self.vip_estimate_mbps: F64 = np.zeros(nic_count)
        self.ceil_fraction: F64 = np.tile([first.ceil_mbps[lane] / link for lane in LANES], (nic_count, 1))

    def step(self, enforced: Bools, vip_demand_fraction: F64, bulk_spike_due: Bools) -> None:
        """One control interval on every enforced NIC (others keep their last rates, as a stopped
        controller leaves them). Demand as a fraction of the link."""
        if not self.policy.adaptive.enabled or not any_true(enforced):
            return
        link = self.policy.link_mbps
        out = shape_many(self.policy, self.vip_estimate_mbps, vip_demand_fraction * link, bulk_spike_due)
        if all_true(enforced):  # every NIC's (the common case): no select
            self.vip_estimate_mbps, self.ceil_fraction = out.vip_estimate_mbps, out.ceil_mbps / link
            return
        self.vip_estimate_mbps = np.where(enforced, out.vip_estimate_mbps, self.vip_estimate_mbps)
        self.ceil_fraction = np.where(enforced[:, None], out.ceil_mbps / link, self.ceil_fraction)
