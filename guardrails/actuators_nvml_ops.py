"""NVML clock, fan and reset actuator: `set_clock_limit`, `set_fan_speed` and `gpu_reset`, over the same
`nvml_for(node) -> NvmlLike` seam as the power actuator (pynvml on a GPU, `world.nvml(node)` in the twin).

- set_clock_limit: nvmlDeviceSetGpuLockedClocks(handle, floor, ceiling) on every GPU of the target; the floor is
  the lowest clock the GPU supports (nvmlDeviceGetSupportedGraphicsClocks at its highest memory clock), so the
  action is a ceiling, not a pin. Read-back: nvmlDeviceGetClockInfo(NVML_CLOCK_SM) at most the ceiling (+ one
  15 MHz clock step). NVML has no getter for a lock, so rollback (and a failed apply) calls
  nvmlDeviceResetGpuLockedClocks: the GPU's own clock management, whatever lock was there before.
- set_fan_speed: nvmlDeviceSetFanSpeed_v2 on every fan of every GPU of the node; read back with
  nvmlDeviceGetFanSpeed_v2; rollback nvmlDeviceSetDefaultFanSpeed_v2 (the driver's own fan control). A GPU
  without fans (liquid-cooled SXM: NVML_ERROR_NOT_SUPPORTED) refuses the action before anything changes.
- gpu_reset: refused unless `node_drained(node)` answers True (the scheduler's read of the node: nothing runs
  there). nvidia-smi -r has no public NVML call; the path NVML offers is nvml.h's drain and removal:
  nvmlDeviceModifyDrainState(pci, ENABLED), nvmlDeviceRemoveGpu(pci), nvmlDeviceDiscoverGpus(pci) (the GPU is
  re-initialised), nvmlDeviceModifyDrainState(pci, DISABLED); the PCI info from nvmlDeviceGetPciInfo_v3 (what
  pynvml's nvmlDeviceGetPciInfo calls). Read-back: the GPU answers by its PCI bus id and
  its drain state is off. A reset cannot be undone: rollback brings the GPU back into service (discover,
  drain state off) and says so.
None of this has met a real GPU here (no driver on these machines): the twin's NVML fake runs the same code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from guardrails.actions import Action
from guardrails.actuators import ActuationResult, NvmlLike
from guardrails.actuators_nvml import NvmlPowerActuator, nvml_error_text
from guardrails.topology import Topology

KINDS = ("set_clock_limit", "set_fan_speed", "gpu_reset")
NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2  # nvml.h nvmlClockType_t
NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1
CLOCK_TOLERANCE_MHZ = 15  # one step of the supported-clock table
FAN_TOLERANCE_PCT = 1


def _bus_id(pci: Any) -> str:
    raw = getattr(pci, "busId", "")
    return raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)


class NvmlOpsActuator:
    """The `Actuator` protocol for clocks, fans and the reset. `node_drained(node name)`: the scheduler's answer
    (None: nobody can say, so gpu_reset is refused)."""

    KINDS = KINDS

    def __init__(
        self,
        nvml_for: Callable[[str], NvmlLike],
        topology: Topology,
        *,
        node_drained: Callable[[str], bool] | None = None,
        initialise: bool = True,
    ) -> None:
        self._power = NvmlPowerActuator(nvml_for, topology, initialise=initialise)  # its GPU naming and init
        self.node_drained = node_drained

    def _gpus(self, target: str) -> list[tuple[str, NvmlLike, Any]]:
        """(name, nvml, handle) for each GPU of the target; raises what NVML raises."""
        out = []
        for gpu in self._power.gpus(target):
            nvml = self._power._nvml(gpu.node)
            out.append((gpu.name, nvml, nvml.nvmlDeviceGetHandleByIndex(gpu.index)))
        return out

    # -- the Actuator protocol ------------------------------------------------------------------------------
    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        try:
            if action.kind == "set_clock_limit":
                return self._clock(action, dry_run)
            if action.kind == "set_fan_speed":
                return self._fan(action, dry_run)
            if action.kind == "gpu_reset":
                return self._reset(action, dry_run)
        except Exception as exc:  # a read before any change failed
            return ActuationResult(
                False, {"dry_run": dry_run}, error=f"{action.target}: {nvml_error_text(exc)}"
            )
        return ActuationResult(False, error=f"the NVML operations actuator has no action {action.kind}")

    def read_back(self, action: Action) -> dict[str, Any]:
        if action.kind == "set_clock_limit":
            ceiling = int(float(action.parameters.get("sm_clock_max_mhz", 0)))
            return {"sm_clock_at_most_mhz": self._clock_read(action.target, ceiling)}
        if action.kind == "set_fan_speed":
            return {"fan_speed_pct": self._fan_read(action.target)}
        if action.kind == "gpu_reset":
            return {"in_service": self._reset_read(action.target)}
        return {}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        errors: list[str] = []
        try:
            gpus = self._gpus(action.target)
        except Exception as exc:
            return ActuationResult(False, error=f"rollback: {nvml_error_text(exc)}")
        for name, nvml, handle in gpus:
            try:
                if action.kind == "set_clock_limit":
                    nvml.nvmlDeviceResetGpuLockedClocks(handle)
                elif action.kind == "set_fan_speed":
                    for fan in range(int(nvml.nvmlDeviceGetNumFans(handle))):
                        nvml.nvmlDeviceSetDefaultFanSpeed_v2(handle, fan)
                elif action.kind == "gpu_reset":
                    self._back_in_service(nvml, handle)
            except Exception as exc:
                errors.append(f"{name}: {nvml_error_text(exc)}")
        if errors:
            return ActuationResult(False, error="rollback failed: " + "; ".join(errors))
        what = {
            "set_clock_limit": "clocks unlocked (nvmlDeviceResetGpuLockedClocks)",
            "set_fan_speed": "fans back under the driver's control (nvmlDeviceSetDefaultFanSpeed_v2)",
            "gpu_reset": "a reset cannot be undone: the GPU is attached and its drain state off",
        }.get(action.kind, "")
        return ActuationResult(True, {"restored": what})

    # -- set_clock_limit ------------------------------------------------------------------------------------
    def _clock(self, action: Action, dry_run: bool) -> ActuationResult:
        ceiling = int(float(action.parameters["sm_clock_max_mhz"]))
        plans = []
        for name, nvml, handle in self._gpus(action.target):
            supported = nvml.nvmlDeviceGetSupportedGraphicsClocks(
                handle, nvml.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_MEM)
            )
            floor, top = min(supported), max(supported)
            if not floor <= ceiling <= top:
                return ActuationResult(
                    False,
                    {"dry_run": dry_run},
                    error=f"{name}: SM clock ceiling {ceiling} MHz outside the supported [{floor}, {top}] MHz; "
                    "nothing changed",
                )
            plans.append((name, nvml, handle, floor))
        if not plans:
            return ActuationResult(False, {"dry_run": dry_run}, error=f"no GPUs in {action.target}")
        expected = {"sm_clock_at_most_mhz": {name: ceiling for name, *_ in plans}}
        previous = {"locked_clocks": "none known (NVML has no getter): rollback unlocks"}
        if dry_run:
            calls = {name: f"nvmlDeviceSetGpuLockedClocks({floor}, {ceiling})" for name, _, _, floor in plans}
            return ActuationResult(True, {"dry_run": True, "calls": calls}, previous, expected)
        done = []
        for name, nvml, handle, floor in plans:
            try:
                nvml.nvmlDeviceSetGpuLockedClocks(handle, floor, ceiling)
                done.append((name, nvml, handle))
            except Exception as exc:
                undone = self._unlock([*done, (name, nvml, handle)])
                return ActuationResult(
                    False,
                    {"dry_run": False, "unlocked": undone},
                    previous,
                    error=f"{name}: {nvml_error_text(exc)}",
                )
        detail = {"dry_run": False, "sm_clock_max_mhz": ceiling, "gpus": len(plans)}
        return ActuationResult(True, detail, previous, expected)

    @staticmethod
    def _unlock(gpus: list[tuple[str, NvmlLike, Any]]) -> list[str]:
        undone = []
        for name, nvml, handle in gpus:
            try:
                nvml.nvmlDeviceResetGpuLockedClocks(handle)
                undone.append(name)
            except Exception:
                continue
        return undone

    def _clock_read(self, target: str, ceiling: int) -> dict[str, int | None]:
        """Per GPU: the ceiling when the SM clock is at or under it, else the clock read (None: no answer)."""
        out: dict[str, int | None] = {}
        for gpu in self._power.gpus(target):
            try:
                nvml = self._power._nvml(gpu.node)
                mhz = int(
                    nvml.nvmlDeviceGetClockInfo(nvml.nvmlDeviceGetHandleByIndex(gpu.index), NVML_CLOCK_SM)
                )
            except Exception:
                out[gpu.name] = None
                continue
            out[gpu.name] = ceiling if mhz <= ceiling + CLOCK_TOLERANCE_MHZ else mhz
        return out

    # -- set_fan_speed ---------------------------------------------------------------------------------------
    def _fan(self, action: Action, dry_run: bool) -> ActuationResult:
        pct = round(float(action.parameters["fan_speed_pct"]))
        plans, previous = [], {}
        for name, nvml, handle in self._gpus(action.target):
            fans = int(nvml.nvmlDeviceGetNumFans(handle))
            if fans < 1:
                return ActuationResult(False, {"dry_run": dry_run}, error=f"{name} has no fan NVML controls")
            previous[name] = [int(nvml.nvmlDeviceGetFanSpeed_v2(handle, f)) for f in range(fans)]
            plans.append((name, nvml, handle, fans))
        if not plans:
            return ActuationResult(False, {"dry_run": dry_run}, error=f"no GPUs in {action.target}")
        expected = {"fan_speed_pct": {name: [pct] * fans for name, _, _, fans in plans}}
        if dry_run:
            return ActuationResult(True, {"dry_run": True, **expected}, {"fan_speed_pct": previous}, expected)
        for name, nvml, handle, fans in plans:
            try:
                for fan in range(fans):
                    nvml.nvmlDeviceSetFanSpeed_v2(handle, fan, pct)
            except Exception as exc:
                back = self.rollback(action, {})
                note = "" if back.ok else f"; {back.error}"
                return ActuationResult(
                    False,
                    {"dry_run": False},
                    {"fan_speed_pct": previous},
                    error=f"{name}: {nvml_error_text(exc)}{note}",
                )
        observed = self._fan_read(action.target)
        return ActuationResult(
            True, {"dry_run": False, "fan_speed_pct": observed}, {"fan_speed_pct": previous}, expected
        )

    def _fan_read(self, target: str) -> dict[str, list[int] | None]:
        out: dict[str, list[int] | None] = {}
        for gpu in self._power.gpus(target):
            try:
                nvml = self._power._nvml(gpu.node)
                handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                out[gpu.name] = [
                    int(nvml.nvmlDeviceGetFanSpeed_v2(handle, f))
                    for f in range(int(nvml.nvmlDeviceGetNumFans(handle)))
                ]
            except Exception:
                out[gpu.name] = None
        return out

    # -- gpu_reset -------------------------------------------------------------------------------------------
    def _reset(self, action: Action, dry_run: bool) -> ActuationResult:
        node = action.target.split("/", 1)[0]
        if self.node_drained is None:
            return ActuationResult(
                False, {"dry_run": dry_run}, error="gpu_reset: no scheduler says whether the node is drained"
            )
        if not self.node_drained(node):
            return ActuationResult(
                False,
                {"dry_run": dry_run},
                error=f"gpu_reset: {node} is not drained (drain it first: drain_node)",
            )
        gpus = self._gpus(action.target)
        if len(gpus) != 1:
            return ActuationResult(
                False, {"dry_run": dry_run}, error=f"gpu_reset takes one GPU, not {action.target}"
            )
        name, nvml, handle = gpus[0]
        pci = nvml.nvmlDeviceGetPciInfo_v3(handle)
        expected = {"in_service": {name: True}}
        calls = [
            "nvmlDeviceModifyDrainState(ENABLED)",
            "nvmlDeviceRemoveGpu",
            "nvmlDeviceDiscoverGpus",
            "nvmlDeviceModifyDrainState(DISABLED)",
        ]
        if dry_run:
            return ActuationResult(
                True, {"dry_run": True, "bus_id": _bus_id(pci), "calls": calls}, {}, expected
            )
        try:
            nvml.nvmlDeviceModifyDrainState(pci, NVML_FEATURE_ENABLED)
            nvml.nvmlDeviceRemoveGpu(pci)
            nvml.nvmlDeviceDiscoverGpus(pci)
            nvml.nvmlDeviceModifyDrainState(pci, NVML_FEATURE_DISABLED)
        except Exception as exc:
            error = f"{name}: {nvml_error_text(exc)}"
            try:
                self._back_in_service(nvml, handle, pci)
            except Exception as again:
                error += f"; bringing it back failed too: {nvml_error_text(again)}"
            return ActuationResult(False, {"dry_run": False, "bus_id": _bus_id(pci)}, error=error)
        return ActuationResult(True, {"dry_run": False, "bus_id": _bus_id(pci), "calls": calls}, {}, expected)

    @staticmethod
    def _back_in_service(nvml: NvmlLike, handle: Any, pci: Any = None) -> None:
        pci = pci if pci is not None else nvml.nvmlDeviceGetPciInfo_v3(handle)
        with contextlib.suppress(Exception):  # attached already
            nvml.nvmlDeviceDiscoverGpus(pci)
        nvml.nvmlDeviceModifyDrainState(pci, NVML_FEATURE_DISABLED)

    def _reset_read(self, target: str) -> dict[str, bool]:
        out: dict[str, bool] = {}
        for gpu in self._power.gpus(target):
            try:
                nvml = self._power._nvml(gpu.node)
                pci = nvml.nvmlDeviceGetPciInfo_v3(nvml.nvmlDeviceGetHandleByIndex(gpu.index))
                handle = nvml.nvmlDeviceGetHandleByPciBusId(_bus_id(pci))
                nvml.nvmlDeviceGetName(handle)
                out[gpu.name] = nvml.nvmlDeviceQueryDrainState(pci) == NVML_FEATURE_DISABLED
            except Exception:
                out[gpu.name] = False
        return out
