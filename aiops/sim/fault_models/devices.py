"""Fault models of a GPU and its host: uncorrectable ECC errors, a GPU lost from the bus, an application's
crash, a degraded PCIe or NVLink link, a starved data loader."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiops.sim import gpu as G
from aiops.sim.fault_models.base import FaultModel

if TYPE_CHECKING:
    from aiops.sim.faults import ActiveFault, Modifiers
    from aiops.sim.world import World


APP_XIDS = (13, 31, 43)  # graphics engine exception, MMU fault, GPU stopped processing: software-induced


def _ecc_start(w: World, f: ActiveFault) -> None:
    s = f.severity
    errors = 1 + int(s > 0.6)
    w.ecc_dbe[f.gpus] += errors
    w.remapped_rows[f.gpus] += errors  # each uncorrectable error's row is remapped (Xid 63 below)
    w.ecc_sbe[f.gpus] += w.rng.integers(5, 40)
    w.emit_xids(f.gpus, 48)  # DBE
    w.emit_xids(f.gpus, 63)  # row remapper: the row is marked for remapping, reset the GPU to activate it
    if s > 0.5:
        w.emit_xids(f.gpus, 94)  # contained: only the process that touched the row is killed
    w.crashed[f.gpus] = True  # the rank gets cudaErrorECCUncorrectable and exits: the job restarts


def _off_bus_start(w: World, f: ActiveFault) -> None:
    w.emit_xids(f.gpus, 79)
    w.lost[f.gpus] = True
    nodes = w.layout.gpu_node[f.gpus]  # the driver blocks NVML for the whole node while it handles the loss
    w.nvml_hang_until_s[nodes] = w.elapsed_s + G.NVML_NODE_HANG_S
    w.dead[f.gpus] = True


def _off_bus_end(w: World, f: ActiveFault) -> None:  # the GPU is back (reset, node serviced)
    w.dead[f.gpus] = False
    w.lost[f.gpus] = False


def _application_start(w: World, f: ActiveFault) -> None:
    w.emit_xids(f.gpus, int(f.xid or 13))
    w.crashed[f.gpus] = True  # an illegal address / MMU fault kills the rank: the job restarts


def _pcie_start(w: World, f: ActiveFault) -> None:
    w.link_width[f.gpus] = 8 if f.severity < 0.6 else 4
    w.link_gen[f.gpus] = 4 if f.severity < 0.8 else 3


def _pcie_ongoing(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    mods.pcie_factor[f.gpus] = 1.15 + 0.5 * f.severity
    w.pcie_replay[f.gpus] += w.rng.poisson(4 + 20 * f.severity, f.gpus.size)


def _pcie_end(w: World, f: ActiveFault) -> None:
    w.link_width[f.gpus] = 16
    w.link_gen[f.gpus] = 5


def _nvlink_ongoing(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    s, t = f.severity, w.elapsed_s
    w.nvlink_crc[f.gpus] += w.rng.poisson(8 + 40 * s, f.gpus.size)
    w.nvlink_replay[f.gpus] += w.rng.poisson(1 + 8 * s, f.gpus.size)
    mods.nvlink_slow[w.layout.gpu_node[f.gpus]] = 0.1 + 0.35 * s
    if t >= f.next_event_s:
        w.emit_xids(f.gpus, 74)
        f.next_event_s = t + 90.0


def _loader_ongoing(w: World, f: ActiveFault, mods: Modifiers, caps: dict[str, float]) -> None:
    if f.node is not None:
        mods.loader_extra_ms[f.node] = 150.0 + 650.0 * f.severity


MODELS: dict[str, FaultModel] = {
    "gpu_ecc_error": FaultModel(start=_ecc_start),
    "gpu_fell_off_bus": FaultModel(start=_off_bus_start, end=_off_bus_end),
    "application_error": FaultModel(start=_application_start, xids=APP_XIDS),
    "pcie_degraded": FaultModel(start=_pcie_start, ongoing=_pcie_ongoing, end=_pcie_end),
    "nvlink_degraded": FaultModel(ongoing=_nvlink_ongoing),
    "input_pipeline_bottleneck": FaultModel(ongoing=_loader_ongoing),
}
