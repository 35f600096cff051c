"""The simulated cluster (a digital twin) with an NVML-shaped API; see docs/SIMULATOR.md."""

from aiops.sim.runner import SimSummary, simulate
from aiops.sim.world import SIM_EPOCH_TS_S, World

__all__ = ["SIM_EPOCH_TS_S", "SimSummary", "World", "simulate"]
