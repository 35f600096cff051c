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
