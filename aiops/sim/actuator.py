"""The twin's actuator: the guardrails' `Actuator` protocol over an `aiops.sim.World`. Power goes through
`guardrails.actuators_nvml.NvmlPowerActuator` over `world.nvml(node)` (the code that drives a real GPU:
nvmlDeviceGetHandleByIndex, nvmlDeviceGetPowerManagementLimit[Constraints],
nvmlDeviceGetPowerManagementDefaultLimit, nvmlDeviceSetPowerManagementLimit; power in mW as in nvml.h); lanes,
job migration and rack coolant flow through the world's own setters; clocks, fans and the GPU reset through
`guardrails.actuators_nvml_ops.NvmlOpsActuator` over the same NVML (a reset only on a drained node); drain,
restart, reboot, ECN and lanes through `aiops.sim.actuator_ops.SimOpsActuator`. Every registry kind has an
executor here (tests/test_executors_walk.py).
"""

from __future__ import annotations

from typing import Any, Protocol

from aiops.sim.actuator_ops import SimOpsActuator
from aiops.sim.world import World
from guardrails.actions import Action
from guardrails.actuators import ActuationResult, Actuator, NvmlLike
from guardrails.actuators_nvml import NvmlPowerActuator
from guardrails.actuators_nvml_ops import NvmlOpsActuator
from guardrails.topology import Topology


class SimWorld(Protocol):
    def nvml(self, node: int) -> NvmlLike: ...

    def set_lanes_enforced(self, nic: str, enforced: bool) -> None: ...

    def node_job(self, node: str) -> str | None: ...

    def move_job(self, from_node: str, to_node: str) -> None: ...

    def coolant_flow_setpoint_lpm(self, rack: str) -> float: ...

    def max_coolant_flow_lpm(self) -> float: ...

    def set_coolant_flow(self, rack: str, lpm: float) -> None: ...


class SimActuator:
    """set_power_limit / reset_power_limit through NVML, enable_lanes through the world; migrate_job (node ->
    idle node, `world.move_job`) and set_cooling_state (a rack's CDU flow setpoint, `world.set_coolant_flow`)
    through the world; a ticket brings the world's repair crew (`world.open_ticket`, aiops/sim/repair.py);
    checks and acknowledgements are recorded only. Anything else answers ok=False (no backend)."""

    RECORD_ONLY = ("open_ticket", "rerun_check", "ack_alert")
    NVML_OPS = NvmlOpsActuator.KINDS
    SCHEDULER = (
        "drain_node",
        "resume_node",
        "restart_job",
        "reboot_node",
        "enable_ecn",
        "set_lane_rate",
        "update_lane_rule",
    )

    def __init__(self, world: SimWorld, topology: Topology) -> None:
        self.world = world
        self.topology = topology
        self._initialised: set[int] = set()
        self._lanes: dict[str, bool] = {}
        self._nvml_power_actuator: NvmlPowerActuator | None = None

    def _nvml(self, name: str) -> NvmlLike:
        node = int(name.removeprefix("node"))  # the twin names its nodes node{n}
        nvml = self.world.nvml(node)
        if node not in self._initialised:
            nvml.nvmlInit()
            self._initialised.add(node)
        return nvml

    def _power(self, action: Action, dry_run: bool) -> ActuationResult:
        """The real-hardware NVML power actuator over `world.nvml(node)`: same code as on a GPU."""
        return self._nvml_power().apply(action, dry_run)

    def _nvml_power(self) -> NvmlPowerActuator:
        if self._nvml_power_actuator is None:
            self._nvml_power_actuator = NvmlPowerActuator(self._nvml, self.topology, initialise=False)
        return self._nvml_power_actuator

    def _inner(self, kind: str) -> Actuator | None:
        """The actuator of the kinds that live in their own module, None for the rest."""
        if kind in self.NVML_OPS:
            drained = getattr(self.world, "drained", None)
            layout = getattr(self.world, "layout", None)

            def node_drained(node: str) -> bool:
                index = node.removeprefix("node")
                if drained is None or layout is None or not index.isdigit() or int(index) >= layout.nodes:
                    return False
                return bool(drained[int(index)])

            return NvmlOpsActuator(self._nvml, self.topology, node_drained=node_drained, initialise=False)
        if kind in self.SCHEDULER and isinstance(self.world, World):
            return SimOpsActuator(self.world)
        return None

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        if action.kind in ("set_power_limit", "reset_power_limit"):
            return self._power(action, dry_run)
        inner = self._inner(action.kind)
        if inner is not None:
            return inner.apply(action, dry_run)
        if action.kind == "enable_lanes":
            previous = {"lanes_enforced": self._lanes_enforced(action.target)}
            if not dry_run:
                self.world.set_lanes_enforced(action.target, True)
                self._lanes[action.target] = True
            return ActuationResult(
                True, {"lanes_enforced": True, "dry_run": dry_run}, previous, {"lanes_enforced": True}
            )
        if action.kind == "migrate_job":
            return self._migrate(action, dry_run)
        if action.kind == "set_cooling_state":
            return self._cooling(action, dry_run)
        if action.kind == "open_ticket" and not dry_run:
            return self._ticket(action)
        if action.kind in self.RECORD_ONLY:
            return ActuationResult(True, {"recorded": action.kind, "dry_run": dry_run})
        return ActuationResult(False, error=f"the simulator has no actuator for {action.kind}")

    def _ticket(self, action: Action) -> ActuationResult:
        """The twin's ticket system: a repair of the target comes after a stated time (aiops/sim/repair.py)."""
        file = getattr(self.world, "open_ticket", None)
        ticket = file(action.target) if file is not None else None
        detail: dict[str, Any] = {"recorded": action.kind, "dry_run": False}
        if ticket is not None:
            detail["repair_due_s"] = ticket.due_s
        return ActuationResult(True, detail)

    def read_back(self, action: Action) -> dict[str, Any]:
        if action.kind in ("set_power_limit", "reset_power_limit"):
            return self._nvml_power().read_back(action)
        inner = self._inner(action.kind)
        if inner is not None:
            return inner.read_back(action)
        if action.kind == "enable_lanes":
            return {"lanes_enforced": self._lanes_enforced(action.target)}
        if action.kind == "migrate_job":
            return self._migrate_read_back(action)
        if action.kind == "set_cooling_state":
            return self._cooling_read_back(action)
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
            return self._nvml_power().rollback(action, previous)
        inner = self._inner(action.kind)
        if inner is not None:
            return inner.rollback(action, previous)
        if action.kind == "enable_lanes" and "lanes_enforced" in previous:
            self.world.set_lanes_enforced(action.target, bool(previous["lanes_enforced"]))
            self._lanes[action.target] = bool(previous["lanes_enforced"])
            return ActuationResult(True, {"restored": previous})
        if action.kind == "migrate_job":
            return self._migrate_rollback(action, previous)
        if action.kind == "set_cooling_state":
            return self._cooling_rollback(action, previous)
        return ActuationResult(False, error=f"no rollback for {action.kind}")

    # -- migrate_job: node -> node (World.move_job); read back World.node_job; rollback moves it back ------
    @staticmethod
    def _move(action: Action) -> tuple[str, str] | str:
        """(from, to) nodes, or why the simulator cannot execute this shape of migrate_job."""
        to = action.parameters.get("to")
        if (
            _is_node(action.target)
            and isinstance(to, str)
            and _is_node(to)
            and set(action.parameters) == {"to"}
        ):
            return action.target, to
        return (
            'the simulator executes node->node moves only (target nodeN, parameters {"to": "nodeM"}); '
            f"got target {action.target[:40]!r}, parameters {str(action.parameters)[:80]}"
        )

    def _migrate(self, action: Action, dry_run: bool) -> ActuationResult:
        move = self._move(action)
        if isinstance(move, str):
            return ActuationResult(False, error=move)
        src, dst = move
        try:
            job, busy = self.world.node_job(src), self.world.node_job(dst)
            if job is None:
                return ActuationResult(False, error=f"{src} runs no job: nothing to migrate")
            if busy is not None:
                return ActuationResult(
                    False, error=f"{dst} is busy (job {busy}): a job moves only onto an idle node"
                )
            if not dry_run:
                self.world.move_job(src, dst)
        except ValueError as exc:
            return ActuationResult(False, error=str(exc))
        detail = {"job": job, "from": src, "to": dst, "dry_run": dry_run}
        return ActuationResult(
            True, detail, {"node_job": {src: job, dst: None}}, {"node_job": {src: None, dst: job}}
        )

    def _migrate_read_back(self, action: Action) -> dict[str, Any]:
        move = self._move(action)
        if isinstance(move, str):
            return {}
        try:
            return {"node_job": {node: self.world.node_job(node) for node in move}}
        except ValueError:
            return {}

    def _migrate_rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        move = self._move(action)
        if isinstance(move, str):
            return ActuationResult(False, error=move)
        src, dst = move
        job = previous.get("node_job", {}).get(src)
        now = {src: self.world.node_job(src), dst: self.world.node_job(dst)}
        if job is None or now != {src: None, dst: job}:
            return ActuationResult(False, error=f"cannot move {job} back from {dst} to {src}: now {now}")
        self.world.move_job(dst, src)
        return ActuationResult(True, {"restored": previous})

    # -- set_cooling_state: a rack's CDU pump setpoint = cooling_fraction x its maximum flow ---------------
    def _cooling_setpoint(self, action: Action) -> tuple[str, float] | str:
        if not action.target.startswith("rack"):
            return (
                f"the simulated twin models no per-node cooling: set_cooling_state acts on a rack's CDU "
                f"(target rackN), not {action.target[:40]!r}"
            )
        fraction = action.parameters.get("cooling_fraction")
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            return "set_cooling_state needs a numeric cooling_fraction"
        return action.target, float(fraction) * self.world.max_coolant_flow_lpm()

    def _cooling(self, action: Action, dry_run: bool) -> ActuationResult:
        setpoint = self._cooling_setpoint(action)
        if isinstance(setpoint, str):
            return ActuationResult(False, error=setpoint)
        rack, lpm = setpoint
        try:
            before = self.world.coolant_flow_setpoint_lpm(rack)
            if not dry_run:
                self.world.set_coolant_flow(rack, lpm)
        except ValueError as exc:
            return ActuationResult(False, error=str(exc))
        detail = {"rack": rack, "coolant_flow_setpoint_lpm": lpm, "dry_run": dry_run}
        return ActuationResult(
            True, detail, {"coolant_flow_setpoint_lpm": before}, {"coolant_flow_setpoint_lpm": lpm}
        )

    def _cooling_read_back(self, action: Action) -> dict[str, Any]:
        try:
            return {"coolant_flow_setpoint_lpm": self.world.coolant_flow_setpoint_lpm(action.target)}
        except ValueError:
            return {}

    def _cooling_rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        if "coolant_flow_setpoint_lpm" not in previous:
            return ActuationResult(False, error="no previous coolant flow setpoint recorded")
        try:
            self.world.set_coolant_flow(action.target, float(previous["coolant_flow_setpoint_lpm"]))
        except ValueError as exc:
            return ActuationResult(False, error=str(exc))
        return ActuationResult(True, {"restored": previous})


def _is_node(name: str) -> bool:
    index = name.removeprefix("node")
    return name.startswith("node") and index.isascii() and index.isdigit()
