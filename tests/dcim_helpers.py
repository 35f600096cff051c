"""A small power world for the DCIM response tests: GPUs with NVML constraints, TDP, limits and draw, an
actuator that records every change it makes, and the readings (`aiops.control.readings.Readings`) a response
round reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiops.control.dcim_response import RoundReport, run_round
from aiops.control.dcim_signals import DcimSignal, record_signal
from aiops.control.readings import ThermalInputs, validation_context
from aiops.labels import gpu_name
from aiops.models import GpuPower
from aiops.store import Store
from guardrails import ActuationResult, Context, Topology
from guardrails.actions import Action
from guardrails.audit import AuditLog
from guardrails.responses import LoadedPolicy, parse_response_bytes
from guardrails.standing import approve_policy
from tests.signing_helpers import shared_keys

NOW_TS_S = 1_700_000_000.0
RACKS, NODES_PER_RACK, GPUS_PER_NODE = 2, 2, 4


@dataclass
class Gpu:
    tdp_w: float = 700.0
    min_w: float = 200.0  # NVML constraints
    max_w: float = 700.0
    limit_w: float = 700.0
    draw_w: float = 610.0
    job: str | None = "train"


@dataclass
class PowerWorld:
    gpus: dict[str, Gpu]
    topology: Topology
    non_gpu_w_per_node: float = 0.0
    changes: list[tuple[str, str, float, float]] = field(default_factory=list)  # proposal, gpu, before, after

    @classmethod
    def grid(
        cls, nodes_per_rack: int = NODES_PER_RACK, gpus_per_node: int = GPUS_PER_NODE, **gpu: Any
    ) -> PowerWorld:
        names = [gpu_name(n, g) for n in range(RACKS * nodes_per_rack) for g in range(gpus_per_node)]
        topology = Topology.grid(RACKS, nodes_per_rack, gpus_per_node, 1, jobs={"train": names})
        return cls({name: Gpu(**gpu) for name in names}, topology)

    def scope_gpus(self, scope: str) -> tuple[str, ...]:
        expanded = self.topology.expand(scope)
        return expanded.gpus if expanded else ()

    def readings(self, priorities: dict[str, int] | None = None) -> PowerReadings:
        return PowerReadings(self, priorities or {})

    def context(self, now_ts_s: float) -> Context:
        return validation_context(self.readings(), self.topology, now_ts_s)

    def limits_w(self, scope: str = "fleet") -> dict[str, float]:
        return {name: self.gpus[name].limit_w for name in self.scope_gpus(scope)}


@dataclass
class PowerReadings:
    """The readings port over a `PowerWorld`, read live (a round sees each step it took)."""

    world: PowerWorld
    job_priorities: dict[str, int]
    now_ts_s: float = NOW_TS_S

    def gpu_power(self, scope: str = "fleet") -> list[GpuPower]:
        gpus = self.world.gpus
        return [
            GpuPower(
                n,
                gpus[n].limit_w,
                gpus[n].min_w,
                gpus[n].max_w,
                gpus[n].tdp_w,
                gpus[n].draw_w,
                gpus[n].job,
                max_sm_clock_mhz=1980.0,
            )
            for n in self.world.scope_gpus(scope)
        ]

    def non_gpu_w(self, scope: str) -> float:
        expanded = self.world.topology.expand(scope)
        return self.world.non_gpu_w_per_node * (len(expanded.nodes) if expanded else 0)

    def priorities(self) -> dict[str, int]:
        return dict(self.job_priorities)

    def thermal(self) -> ThermalInputs:
        raise NotImplementedError("the power world has no temperatures")


def run_round_on(
    store: Store, text: str, world: PowerWorld, now_ts_s: float, priorities: dict[str, int] | None = None
) -> RoundReport:
    """One response round over the world, its actuator recording every change."""
    return run_round(
        store, loaded(text), world.readings(priorities), world.topology, WorldActuator(world), now_ts_s
    )


class WorldActuator:
    """Sets limits in a `PowerWorld` the way NVML would (refuses values outside the constraints)."""

    def __init__(self, world: PowerWorld) -> None:
        self.world = world

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        gpus = self.world.scope_gpus(action.target)
        if action.kind != "set_power_limit" or not gpus:
            return ActuationResult(False, error=f"cannot {action.kind} on {action.target}")
        watts = float(action.parameters["power_limit_w"])
        previous = {g: self.world.gpus[g].limit_w for g in gpus}
        for g in gpus:
            gpu = self.world.gpus[g]
            if not gpu.min_w <= watts <= gpu.max_w:
                return ActuationResult(False, error="NVML_ERROR_INVALID_ARGUMENT")
        if not dry_run:
            for g in gpus:
                self.world.changes.append((action.proposal_id, g, self.world.gpus[g].limit_w, watts))
                self.world.gpus[g].limit_w = watts
        expected = {"power_limit_w": dict.fromkeys(gpus, watts)}
        return ActuationResult(True, {**expected, "dry_run": dry_run}, {"power_limit_w": previous}, expected)

    def read_back(self, action: Action) -> dict[str, Any]:
        return {
            "power_limit_w": {g: self.world.gpus[g].limit_w for g in self.world.scope_gpus(action.target)}
        }

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        for g, watts in previous.get("power_limit_w", {}).items():
            self.world.gpus[g].limit_w = watts
        return ActuationResult(True)


def policy_text(
    *,
    mode: str = "automatic",
    scopes: str = "[rack]",
    envelope: str = "{min_fraction_of_tdp: 0.4, max_fraction_of_tdp: 1.0, max_step_w: 150}",
    step_interval_s: float = 30,
    extra: str = "",
) -> str:
    return (
        "version: 1\nrules:\n"
        f"  - {{rule_id: dcim-cap, on: dcim_cap, respond: apply_allocator, mode: {mode}, scopes: {scopes},\n"
        f"     envelope: {envelope}, step_interval_s: {step_interval_s}}}\n"
        f"  - {{rule_id: dcim-clear, on: dcim_clear, respond: restore_limits, mode: {mode}, scopes: {scopes},\n"
        f"     envelope: {envelope}, step_interval_s: {step_interval_s}}}\n" + extra
    )


def loaded(text: str, path: str = "responses.yaml") -> LoadedPolicy:
    return parse_response_bytes(text.encode(), path)


def write_policy(directory: Path, text: str, name: str = "responses.yaml") -> Path:
    path = directory / name
    path.write_bytes(text.encode())
    return path


def approve(
    store: Store, policy: LoadedPolicy, *people: str, ts_s: float = NOW_TS_S - 60, ttl_s: float = 86_400.0
) -> None:
    """Signed approvals by `people` (keys from `tests.signing_helpers.shared_keys`)."""
    keys = shared_keys()
    for person in people or ("alice", "bob")[: policy.policy.approvals_required]:
        approve_policy(AuditLog(store), policy, keys.signer(person), keys.verifier(), ts_s, ttl_s)


def signal(store: Store, scope: str, budget_kw: float | None, ts_s: float = NOW_TS_S - 1) -> None:
    kind = "cap" if budget_kw is not None else "clear"
    record_signal(store, DcimSignal(scope, kind, budget_kw, ts_s, "test"))
