"""The twin's scheduler and network kinds, each with dry run, read-back and rollback (the `Actuator` protocol):

- drain_node: `operations.drain` (the node takes no work; its job requeues onto an idle node or stops in
  place); read back `{"drained": True}`; rollback resumes the node (a held job relaunches there).
- resume_node: `operations.resume` (the drain lifted; a job held there relaunches); read back
  `{"drained": False}`; rollback drains it again.
- restart_job: `operations.restart_job` (relaunch from the checkpoint; `exclude`: move off that node first);
  read back the job's restart count; a restart cannot be undone (rollback says so).
- reboot_node: `operations.reboot` (every GPU reset, the job on it relaunched); read back the reboot count; a
  reboot cannot be undone.
- enable_ecn, set_lane_rate, update_lane_rule: the NIC's ECN flag, a lane's HTB ceil fraction, the NIC-local
  override rules (a `rule_id` + `lane` re-lanes that rule; without them the overrides on the NIC, what
  misclassified its traffic, are dropped so the policy's intended lanes apply); rollback restores the
  previous value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aiops.datapath.policy import LANES
from aiops.sim import operations as ops
from aiops.sim.network import Rule
from aiops.sim.world import World
from guardrails.actions import Action
from guardrails.actuators import ActuationResult

KINDS = (
    "drain_node",
    "resume_node",
    "restart_job",
    "reboot_node",
    "enable_ecn",
    "set_lane_rate",
    "update_lane_rule",
)


class SimOpsActuator:
    KINDS = KINDS

    def __init__(self, world: World) -> None:
        self.world = world

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        try:
            previous = self._state(action)
            expected = self._expected(action, previous)
            if dry_run:
                return ActuationResult(True, {"dry_run": True, **expected}, previous, expected)
            detail = self._do(action)
        except (ValueError, KeyError, IndexError) as exc:
            return ActuationResult(False, {"dry_run": dry_run}, error=f"{action.kind}: {exc}")
        return ActuationResult(True, {"dry_run": False, **detail}, previous, expected)

    def read_back(self, action: Action) -> dict[str, Any]:
        try:
            return self._state(action)
        except (ValueError, KeyError, IndexError):
            return {}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        w = self.world
        try:
            if action.kind == "drain_node":
                if not previous.get("drained", False):
                    ops.resume(w, action.target)
            elif action.kind == "resume_node":
                if previous.get("drained", False):
                    ops.drain(w, action.target)
            elif action.kind == "enable_ecn":
                w.set_ecn_enabled(action.target, bool(previous["ecn_enabled"]))
            elif action.kind == "set_lane_rate":
                lane = LANES.index(str(action.parameters["lane"]))
                w.lane_control.ceil_fraction[w.layout.nic_index[action.target], lane] = float(
                    previous["ceil_fraction"]
                )
            elif action.kind == "update_lane_rule":
                w.set_rules(tuple(Rule(**r) for r in previous["rules"]))
            else:
                return ActuationResult(False, error=f"{action.kind} cannot be undone (it already happened)")
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            return ActuationResult(False, error=f"rollback of {action.kind}: {exc}")
        return ActuationResult(True, {"restored": previous})

    # -- per kind --------------------------------------------------------------------------------------------
    def _nic(self, action: Action) -> int:
        index = self.world.layout.nic_index.get(action.target)
        if index is None:
            raise ValueError(f"no NIC '{action.target[:40]}' in the twin")
        return index

    def _state(self, action: Action) -> dict[str, Any]:
        w, kind = self.world, action.kind
        if kind in ("drain_node", "resume_node"):
            return {"drained": bool(w.drained[w._node(action.target)])}
        if kind == "restart_job":
            return {"job_restarts": int(w.job_restarts[ops.job_index(w, action.target)])}
        if kind == "reboot_node":
            return {"node_reboots": int(w.node_reboots[w._node(action.target)])}
        if kind == "enable_ecn":
            return {"ecn_enabled": bool(w.ecn_enabled[self._nic(action)])}
        if kind == "set_lane_rate":
            lane = LANES.index(str(action.parameters["lane"]))
            return {"ceil_fraction": float(w.lane_control.ceil_fraction[self._nic(action), lane])}
        if kind == "update_lane_rule":
            self._nic(action)
            return {"rules": [dataclasses.asdict(r) for r in w.rules]}
        raise ValueError(f"the twin's scheduler/network actuator has no action {kind}")

    def _expected(self, action: Action, previous: dict[str, Any]) -> dict[str, Any]:
        kind = action.kind
        if kind in ("drain_node", "resume_node"):
            return {"drained": kind == "drain_node"}
        if kind == "restart_job":
            return {"job_restarts": previous["job_restarts"] + 1}
        if kind == "reboot_node":
            return {"node_reboots": previous["node_reboots"] + 1}
        if kind == "enable_ecn":
            return {"ecn_enabled": True}
        if kind == "set_lane_rate":
            return {"ceil_fraction": float(action.parameters["fraction"])}
        return {"rules": [dataclasses.asdict(r) for r in self._new_rules(action)]}

    def _new_rules(self, action: Action) -> tuple[Rule, ...]:
        rule_id, lane = action.parameters.get("rule_id"), action.parameters.get("lane")
        if rule_id and lane:
            if not any(r.rule_id == rule_id for r in self.world.rules):
                raise ValueError(f"no lane rule '{str(rule_id)[:64]}'")
            return tuple(
                dataclasses.replace(r, lane=lane) if r.rule_id == rule_id else r for r in self.world.rules
            )
        return tuple(r for r in self.world.rules if not (r.override and r.scope == action.target))

    def _do(self, action: Action) -> dict[str, Any]:
        w, kind = self.world, action.kind
        if kind == "drain_node":
            return ops.drain(w, action.target)
        if kind == "resume_node":
            ops.resume(w, action.target)
            return {"resumed": action.target}
        if kind == "restart_job":
            exclude = action.parameters.get("exclude")
            return {"moved_to": ops.restart_job(w, action.target, str(exclude) if exclude else None)}
        if kind == "reboot_node":
            ops.reboot(w, action.target)
            return {"rebooted": action.target}
        if kind == "enable_ecn":
            w.set_ecn_enabled(action.target, True)
            return {"ecn_enabled": True}
        if kind == "set_lane_rate":
            lane = LANES.index(str(action.parameters["lane"]))
            w.lane_control.ceil_fraction[self._nic(action), lane] = float(action.parameters["fraction"])
            return {"ceil_fraction": float(action.parameters["fraction"])}
        rules = self._new_rules(action)
        w.set_rules(rules)
        return {"rules": len(rules)}
