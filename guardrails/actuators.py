"""The actuator protocol (the httpx transport habit) and `RecordingActuator` for tests and dry runs. Thin: the
executor decides, actuators do. Backends: NVML power limits (`guardrails.actuators_nvml`), sysfs powercap and
cooling devices (`guardrails.actuators_sysfs`), and the twin (`aiops.sim.actuator.SimActuator`, which lives
with the world it drives).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from guardrails.actions import Action


@dataclass(frozen=True)
class ActuationResult:
    ok: bool
    detail: dict[str, Any] = field(default_factory=dict)  # what was (or, dry run, would be) done
    previous: dict[str, Any] = field(default_factory=dict)  # what rollback restores
    expected: dict[str, Any] = field(default_factory=dict)  # what read_back should then show
    error: str = ""


class Actuator(Protocol):
    def apply(self, action: Action, dry_run: bool) -> ActuationResult: ...

    def read_back(self, action: Action) -> dict[str, Any]: ...

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult: ...


class RecordingActuator:
    """Applies nothing; remembers every call. `state` maps target -> last parameters applied."""

    def __init__(self) -> None:
        self.applied: list[Action] = []
        self.dry_runs: list[Action] = []
        self.rollbacks: list[Action] = []
        self.state: dict[str, dict[str, Any]] = {}

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        previous = dict(self.state.get(action.target, {}))
        expected = {"kind": action.kind, **action.parameters}
        if dry_run:
            self.dry_runs.append(action)
            return ActuationResult(True, {"dry_run": True, **expected}, previous, expected)
        self.applied.append(action)
        self.state[action.target] = expected
        return ActuationResult(True, dict(expected), previous, expected)

    def read_back(self, action: Action) -> dict[str, Any]:
        return dict(self.state.get(action.target, {}))

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        self.rollbacks.append(action)
        self.state[action.target] = dict(previous)
        return ActuationResult(True, {"restored": previous})


class NvmlLike(Protocol):
    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int: ...

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int: ...

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None: ...

    # clocks, fans and the reset path (guardrails.actuators_nvml_ops)
    def nvmlDeviceGetName(self, handle: Any) -> str: ...

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int: ...

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: Any, memoryClockMHz: int) -> list[int]: ...

    def nvmlDeviceSetGpuLockedClocks(self, handle: Any, minGpuClockMHz: int, maxGpuClockMHz: int) -> None: ...

    def nvmlDeviceResetGpuLockedClocks(self, handle: Any) -> None: ...

    def nvmlDeviceGetNumFans(self, device: Any) -> int: ...

    def nvmlDeviceGetFanSpeed_v2(self, handle: Any, fan: int) -> int: ...

    def nvmlDeviceSetFanSpeed_v2(self, handle: Any, index: int, speed: int) -> None: ...

    def nvmlDeviceSetDefaultFanSpeed_v2(self, handle: Any, index: int) -> None: ...

    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any: ...

    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str) -> Any: ...

    def nvmlDeviceQueryDrainState(self, pciInfo: Any) -> int: ...

    def nvmlDeviceModifyDrainState(self, pciInfo: Any, newState: int) -> None: ...

    def nvmlDeviceRemoveGpu(self, pciInfo: Any) -> None: ...

    def nvmlDeviceDiscoverGpus(self, pciInfo: Any) -> None: ...
