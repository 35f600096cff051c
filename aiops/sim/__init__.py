"""The simulated cluster (a digital twin) with an NVML-shaped API; see docs/SIMULATOR.md.

The names below are loaded on first use (PEP 562): importing a submodule (`aiops.sim.twin`) does not load the
runner and its Arrow output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiops.sim.runner import SimSummary, simulate
    from aiops.sim.world import SIM_EPOCH_TS_S, World

__all__ = ["SIM_EPOCH_TS_S", "SimSummary", "World", "simulate"]


def __getattr__(name: str) -> Any:
    if name in ("SimSummary", "simulate"):
        from aiops.sim import runner

        return getattr(runner, name)
    if name in ("SIM_EPOCH_TS_S", "World"):
        from aiops.sim import world

        return getattr(world, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
