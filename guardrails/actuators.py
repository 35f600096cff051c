"""Actuator backends behind one protocol (the httpx transport habit): `RecordingActuator` for tests and dry
runs, `SimActuator` over the simulated world's NVML-shaped API. Thin: the executor decides, actuators do.

`SimActuator` uses only `world.nvml(node)` (nvmlDeviceGetHandleByIndex, nvmlDeviceGetPowerManagementLimit,
nvmlDeviceGetPowerManagementDefaultLimit, nvmlDeviceSetPowerManagementLimit; power in mW as in nvml.h) and
`world.set_lanes_enforced(nic, enabled)`, typed by a protocol so nothing here imports `aiops.sim`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from guardrails.actions import Action
from guardrails.topology import Topology


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


class SimWorld(Protocol):
    def nvml(self, node: int) -> NvmlLike: ...

    def set_lanes_enforced(self, nic: str, enforced: bool) -> None: ...


_GPU = re.compile(r"^node(\d+)/gpu(\d+)$", re.ASCII)


class SimActuator:
    """set_power_limit / reset_power_limit through NVML, enable_lanes through the world; tickets, checks and
    acknowledgements are recorded only. Anything else answers ok=False (no backend)."""

    RECORD_ONLY = ("open_ticket", "rerun_check", "ack_alert")

    def __init__(self, world: SimWorld, topology: Topology) -> None:
        self.world = world
        self.topology = topology
        self._initialised: set[int] = set()
        self._lanes: dict[str, bool] = {}

    def _nvml(self, node: int) -> NvmlLike:
        nvml = self.world.nvml(node)
        if node not in self._initialised:
            nvml.nvmlInit()
            self._initialised.add(node)
        return nvml

    def _gpus(self, target: str) -> list[tuple[str, int, int]]:
        scope = self.topology.expand(target)
        out = []
        for name in scope.gpus if scope else ():
            match = _GPU.match(name)
            if match:
                out.append((name, int(match.group(1)), int(match.group(2))))
        return out

    def _power(self, action: Action, dry_run: bool) -> ActuationResult:
        previous: dict[str, Any] = {}
        expected: dict[str, Any] = {}
        gpus = self._gpus(action.target)
        if not gpus:
            return ActuationResult(False, error=f"no GPUs in {action.target}")
        for name, node, index in gpus:
            nvml = self._nvml(node)
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            tdp_w = nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0
            previous[name] = nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
            if action.kind == "reset_power_limit":
                watts = tdp_w
            elif "power_limit_w" in action.parameters:
                watts = float(action.parameters["power_limit_w"])
            else:
                watts = float(action.parameters["fraction_of_tdp"]) * tdp_w
            expected[name] = round(watts * 1000) / 1000.0
            if not dry_run:
                nvml.nvmlDeviceSetPowerManagementLimit(handle, round(watts * 1000))  # mW, nvml.h
        detail = {"power_limit_w": expected, "gpus": len(expected), "dry_run": dry_run}
        return ActuationResult(True, detail, {"power_limit_w": previous}, {"power_limit_w": expected})

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        if action.kind in ("set_power_limit", "reset_power_limit"):
            return self._power(action, dry_run)
        if action.kind == "enable_lanes":
            previous = {"lanes_enforced": self._lanes_enforced(action.target)}
            if not dry_run:
                self.world.set_lanes_enforced(action.target, True)
                self._lanes[action.target] = True
            return ActuationResult(True, {"lanes_enforced": True, "dry_run": dry_run}, previous,
                                   {"lanes_enforced": True})  # fmt: skip
        if action.kind in self.RECORD_ONLY:
            return ActuationResult(True, {"recorded": action.kind, "dry_run": dry_run})
        return ActuationResult(False, error=f"the simulator has no actuator for {action.kind}")

    def read_back(self, action: Action) -> dict[str, Any]:
        if action.kind in ("set_power_limit", "reset_power_limit"):
            limits = {}
            for name, node, index in self._gpus(action.target):
                nvml = self._nvml(node)
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                limits[name] = nvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
            return {"power_limit_w": limits}
        if action.kind == "enable_lanes":
            return {"lanes_enforced": self._lanes_enforced(action.target)}
        return {}

    def _lanes_enforced(self, nic: str) -> bool:
        """The world's own flag when it exposes one (`aiops.sim.World.lanes_enforced`), else what we set."""
        flags = getattr(self.world, "lanes_enforced", None)
        index = getattr(getattr(self.world, "layout", None), "nic_index", {}).get(nic)
        if flags is not None and index is not None:
            return bool(flags[index])
        return self._lanes.get(nic, False)

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        if action.kind in ("set_power_limit", "reset_power_limit"):
            limits: dict[str, float] = previous.get("power_limit_w", {})
            for name, node, index in self._gpus(action.target):
                if name in limits:
                    nvml = self._nvml(node)
                    handle = nvml.nvmlDeviceGetHandleByIndex(index)
                    nvml.nvmlDeviceSetPowerManagementLimit(handle, round(limits[name] * 1000))
            return ActuationResult(True, {"restored": previous})
        if action.kind == "enable_lanes" and "lanes_enforced" in previous:
            self.world.set_lanes_enforced(action.target, bool(previous["lanes_enforced"]))
            self._lanes[action.target] = bool(previous["lanes_enforced"])
            return ActuationResult(True, {"restored": previous})
        return ActuationResult(False, error=f"no rollback for {action.kind}")
