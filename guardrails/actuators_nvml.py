"""NVML power limit actuator: `set_power_limit` / `reset_power_limit` on a GPU, node, rack or the fleet.

The same code drives a real GPU (the `pynvml` module of nvidia-ml-py) and the simulator (`world.nvml(node)`,
an `aiops.sim.nvml.SimNvml`): both are reached through `nvml_for(node_name) -> NvmlLike` (a host's name such as
`gpu-a100-017`, or the twin's `node3`); a GPU's NVML index is its local index in `{host}/gpu{g}`. Power in mW, as
nvml.h. An action is all or nothing:

1. plan: for every GPU of the target read the current limit, the default limit (the TDP) and
   `nvmlDeviceGetPowerManagementLimitConstraints` ([min_mW, max_mW]); a value outside them refuses the whole
   action before any GPU is touched (a dry run stops here and reports the plan);
2. set each GPU with `nvmlDeviceSetPowerManagementLimit`, then read it back with
   `nvmlDeviceGetPowerManagementLimit`;
3. any NVML error or a read-back off by more than `tolerance_mw` restores every GPU already changed by this
   action to its previous limit (each restore read back too) and answers ok=False.

Why the read-back is the proof, not the absence of an exception: nvidia-ml-py 13.615.71 checks the return
code of `nvmlDeviceSetPowerManagementLimit`, but its `nvmlDeviceSetPowerManagementLimit_v2` (the power-scope
variant) calls the driver and returns NVML_SUCCESS whatever the driver answered (`ret` is never passed to
`_nvmlCheckReturn`), so a refused set can look like a success; and another tool (nvidia-smi -pl, a DCIM
agent) may change the limit between our set and our read. Tolerance: nvml.h does not promise that a limit
reads back to the milliwatt, so the default `tolerance_mw` is 1000 (1 W, the resolution `nvidia-smi -pl`
takes); `expected` then carries what the driver reports, so the executor's own read-back compares equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiops.labels import component_kind, local_index, node_of
from guardrails.actions import Action
from guardrails.actuators import ActuationResult, NvmlLike
from guardrails.topology import Topology

KINDS = ("set_power_limit", "reset_power_limit")
DEFAULT_TOLERANCE_MW = 1000


def nvml_error_text(exc: BaseException) -> str:
    """`NVMLError_NoPermission (code 4): Insufficient Permissions` for a pynvml error (the subclass names
    NVML's return code, nvml.h), `TypeName: message` for anything else."""
    code = getattr(exc, "value", None)
    if isinstance(code, int) and type(exc).__name__.startswith("NVMLError"):
        return f"{type(exc).__name__} (code {code}): {exc}"
    return f"{type(exc).__name__}: {exc}"


def _w(milliwatts: int) -> float:
    return milliwatts / 1000.0


@dataclass(frozen=True)
class _Gpu:
    name: str
    node: str  # its host's component name
    index: int  # its NVML index on that host


@dataclass(frozen=True)
class _Plan:
    gpu: _Gpu
    handle: Any
    previous_mw: int
    target_mw: int
    min_mw: int
    max_mw: int


class NvmlPowerActuator:
    """The `Actuator` protocol for the two power kinds. `nvml_for(node)` answers the NVML of a node (by its
    component name); with `initialise`, `nvmlInit` is called once per node before the first use."""

    KINDS = KINDS

    def __init__(
        self,
        nvml_for: Callable[[str], NvmlLike],
        topology: Topology,
        *,
        tolerance_mw: int = DEFAULT_TOLERANCE_MW,
        initialise: bool = True,
    ) -> None:
        self.nvml_for = nvml_for
        self.topology = topology
        self.tolerance_mw = tolerance_mw
        self.initialise = initialise
        self._initialised: set[str] = set()

    # -- plumbing -------------------------------------------------------------------------------------------
    def _nvml(self, node: str) -> NvmlLike:
        nvml = self.nvml_for(node)
        if self.initialise and node not in self._initialised:
            nvml.nvmlInit()
            self._initialised.add(node)
        return nvml

    def gpus(self, target: str) -> list[_Gpu]:
        scope = self.topology.expand(target)
        out = []
        for name in scope.gpus if scope else ():
            node, index = node_of(name), local_index(name)
            if node is not None and index is not None and component_kind(name) == "gpu":
                out.append(_Gpu(name, node, index))
        return out

    def _constraints_mw(self, nvml: NvmlLike, handle: Any, default_mw: int) -> tuple[int, int]:
        """[min, max] from nvmlDeviceGetPowerManagementLimitConstraints. A binding without the call, or
        NVML_ERROR_NOT_SUPPORTED (3, nvml.h), falls back to [0, default limit]: the policy's own ceiling
        (100 % of TDP); the driver's check and the read-back still stand behind it."""
        call = getattr(nvml, "nvmlDeviceGetPowerManagementLimitConstraints", None)
        if call is None:
            return 0, default_mw
        try:
            low, high = call(handle)
        except Exception as exc:
            if getattr(exc, "value", None) == 3 and type(exc).__name__.startswith("NVMLError"):
                return 0, default_mw
            raise
        return int(low), int(high)

    def _target_mw(self, action: Action, default_mw: int) -> int:
        if action.kind == "reset_power_limit":
            return default_mw
        if "power_limit_w" in action.parameters:
            return round(float(action.parameters["power_limit_w"]) * 1000)
        return round(float(action.parameters["fraction_of_tdp"]) * default_mw)

    def _plan(self, action: Action) -> tuple[list[_Plan], str]:
        """Read everything, change nothing. The error names the GPU, the value and the allowed range."""
        gpus = self.gpus(action.target)
        if not gpus:
            return [], f"no GPUs in {action.target}"
        plans: list[_Plan] = []
        for gpu in gpus:
            try:
                nvml = self._nvml(gpu.node)
                handle = nvml.nvmlDeviceGetHandleByIndex(gpu.index)
                default_mw = int(nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle))
                previous_mw = int(nvml.nvmlDeviceGetPowerManagementLimit(handle))
                low, high = self._constraints_mw(nvml, handle, default_mw)
            except Exception as exc:  # nothing was changed yet: report and stop
                return [], f"{gpu.name}: reading the power limit failed: {nvml_error_text(exc)}"
            try:
                target_mw = self._target_mw(action, default_mw)
            except (KeyError, TypeError, ValueError, OverflowError):
                return [], f"{action.kind}: parameters {action.parameters} do not give a finite power limit"
            if not low <= target_mw <= high:
                return [], (
                    f"{gpu.name}: power limit {_w(target_mw):g} W outside the NVML constraints "
                    f"[{_w(low):g}, {_w(high):g}] W (nvmlDeviceGetPowerManagementLimitConstraints); "
                    "nothing changed"
                )
            plans.append(_Plan(gpu, handle, previous_mw, target_mw, low, high))
        return plans, ""

    def _set_and_read(self, gpu: _Gpu, handle: Any, milliwatts: int) -> tuple[int | None, str]:
        """Set one GPU and read it back: (what the driver reports, error text or "")."""
        nvml = self._nvml(gpu.node)
        try:
            nvml.nvmlDeviceSetPowerManagementLimit(handle, milliwatts)
        except Exception as exc:
            return self._read_mw(gpu, handle), f"setting {_w(milliwatts):g} W failed: {nvml_error_text(exc)}"
        observed = self._read_mw(gpu, handle)
        if observed is None:
            return None, f"set {_w(milliwatts):g} W but the read-back failed"
        if abs(observed - milliwatts) > self.tolerance_mw:
            return observed, (
                f"set {_w(milliwatts):g} W but the driver reports {_w(observed):g} W "
                f"(tolerance {_w(self.tolerance_mw):g} W)"
            )
        return observed, ""

    def _read_mw(self, gpu: _Gpu, handle: Any) -> int | None:
        try:
            return int(self._nvml(gpu.node).nvmlDeviceGetPowerManagementLimit(handle))
        except Exception:
            return None

    def _restore(self, plans: list[_Plan]) -> tuple[list[str], list[str]]:
        """Put each GPU back to its previous limit: (restored GPU names, errors)."""
        restored, errors = [], []
        for plan in plans:
            _, error = self._set_and_read(plan.gpu, plan.handle, plan.previous_mw)
            if error:
                errors.append(f"{plan.gpu.name}: {error}")
            else:
                restored.append(plan.gpu.name)
        return restored, errors

    # -- the Actuator protocol ------------------------------------------------------------------------------
    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        if action.kind not in KINDS:
            return ActuationResult(False, error=f"the NVML actuator has no action {action.kind}")
        plans, error = self._plan(action)
        if error:
            return ActuationResult(False, {"dry_run": dry_run}, error=error)
        previous = {p.gpu.name: _w(p.previous_mw) for p in plans}
        if dry_run:
            wanted = {p.gpu.name: _w(p.target_mw) for p in plans}
            changes = sum(p.target_mw != p.previous_mw for p in plans)
            detail = {"power_limit_w": wanted, "gpus": len(plans), "changes": changes, "dry_run": True}
            return ActuationResult(True, detail, {"power_limit_w": previous}, {"power_limit_w": wanted})
        observed: dict[str, float] = {}
        touched: list[_Plan] = []
        for plan in plans:
            reported_mw, error = self._set_and_read(plan.gpu, plan.handle, plan.target_mw)
            if reported_mw != plan.previous_mw:  # changed, or unknown: restore it too on failure
                touched.append(plan)
            if error:
                restored, rollback_errors = self._restore(touched)
                message = f"{plan.gpu.name}: {error}; restored {len(restored)} GPU(s) to their previous limit"
                if rollback_errors:
                    message += "; ROLLBACK FAILED: " + "; ".join(rollback_errors)
                detail = {
                    "failed_gpu": plan.gpu.name,
                    "restored": restored,
                    "rollback_errors": rollback_errors,
                    "dry_run": False,
                }
                return ActuationResult(False, detail, {"power_limit_w": previous}, error=message)
            assert reported_mw is not None
            observed[plan.gpu.name] = _w(reported_mw)
        detail = {"power_limit_w": observed, "gpus": len(plans), "dry_run": False}
        return ActuationResult(True, detail, {"power_limit_w": previous}, {"power_limit_w": observed})

    def read_back(self, action: Action) -> dict[str, Any]:
        """{"power_limit_w": {gpu: W or None}}; None where NVML did not answer (a lost GPU)."""
        limits: dict[str, float | None] = {}
        for gpu in self.gpus(action.target):
            try:
                handle = self._nvml(gpu.node).nvmlDeviceGetHandleByIndex(gpu.index)
            except Exception:
                limits[gpu.name] = None
                continue
            reported_mw = self._read_mw(gpu, handle)
            limits[gpu.name] = None if reported_mw is None else _w(reported_mw)
        return {"power_limit_w": limits}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        """Restore `previous["power_limit_w"]` (W per GPU) on the GPUs of the target; every GPU is tried and
        read back, and any failure makes the result ok=False naming the GPU."""
        limits: dict[str, float] = previous.get("power_limit_w", {})
        restored, errors = [], []
        for gpu in self.gpus(action.target):
            if gpu.name not in limits:
                continue
            try:
                handle = self._nvml(gpu.node).nvmlDeviceGetHandleByIndex(gpu.index)
            except Exception as exc:
                errors.append(f"{gpu.name}: {nvml_error_text(exc)}")
                continue
            _, error = self._set_and_read(gpu, handle, round(float(limits[gpu.name]) * 1000))
            if error:
                errors.append(f"{gpu.name}: {error}")
            else:
                restored.append(gpu.name)
        detail = {"restored": {"power_limit_w": {g: limits[g] for g in restored}}}
        if errors:
            return ActuationResult(False, detail, error="rollback failed: " + "; ".join(errors))
        return ActuationResult(True, detail)
