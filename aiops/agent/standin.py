"""A stand-in for the guardrails layer, used only while `guardrails` is not importable: a small action registry,
an approval book with expiry and an execution ledger (JSON beside the database), and the simulated twin as the
only actuator. Same rules the agent relies on: nothing physical runs without a recorded, unexpired approval by
a person, and a proposal id executes at most once."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiops.agent.ports import ApprovalRefused, ExecutionRefused, Verdict
from aiops.agent.twin import Twin

# kind -> (physical, risk class, component kinds it may target)
KINDS: dict[str, tuple[bool, str, tuple[str, ...]]] = {
    "set_power_limit": (True, "medium", ("gpu", "node")),
    "reset_power_limit": (True, "low", ("gpu", "node")),
    "enable_lanes": (True, "low", ("nic",)),
    "enable_ecn": (True, "low", ("nic",)),
    "drain_node": (True, "high", ("node",)),
    "open_ticket": (False, "low", ("gpu", "node", "nic", "rack", "fleet", "job", "policy")),
    "rerun_check": (False, "low", ("gpu", "node", "nic", "rack", "fleet", "job")),
}
TDP_W = 700.0
SIM_KINDS = (
    "set_power_limit",
    "reset_power_limit",
    "enable_lanes",
    "enable_ecn",
    "open_ticket",
    "rerun_check",
)


def action_hash(action: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(action, sort_keys=True).encode()).hexdigest()


def _kind_of(component: str) -> str:
    if component.startswith(("job:", "policy:")):
        return component.split(":")[0]
    if "/gpu" in component:
        return "gpu"
    if "/nic" in component:
        return "nic"
    for prefix in ("node", "rack", "fleet"):
        if component.startswith(prefix):
            return prefix
    return "unknown"


def sim_actuate(world: Any, action: dict[str, Any]) -> dict[str, Any]:
    """Apply an action to a simulated world; returns what was done."""
    kind, target, params = action["kind"], action["target"], action.get("parameters", {})
    if kind in ("set_power_limit", "reset_power_limit"):
        watts = (
            TDP_W
            if kind == "reset_power_limit"
            else float(params.get("watts") or TDP_W * float(params.get("fraction_of_tdp", 0.8)))
        )
        gpus = [int(g) for g in world.layout.gpus_of(target)]
        for g in gpus:
            world.set_power_limit_w(g, watts)
        return {"gpus": len(gpus), "power_limit_w": watts}
    if kind == "enable_lanes":
        world.set_lanes_enforced(target, True)
        return {"lanes_enforced": True}
    if kind == "enable_ecn":
        world.set_ecn_enabled(target, True)
        return {"ecn_enabled": True}
    if kind in ("open_ticket", "rerun_check"):
        return {"recorded": kind}
    raise ExecutionRefused("unsupported", f"the simulator has no actuator for {kind}")


class _JsonBook:
    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Any]:
        if not self.path.exists():
            return {}
        data: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        return data

    def save(self, data: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".book-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)


class StandInGuard:
    def __init__(
        self,
        state_dir_prefix: Path,
        twin: Twin | None,
        components: set[str],
        *,
        ttl_s: float = 900.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.approvals = _JsonBook(Path(str(state_dir_prefix) + ".approvals.json"))
        self.ledger = _JsonBook(Path(str(state_dir_prefix) + ".executions.json"))
        self.twin = twin
        self.components = components
        self.ttl_s = ttl_s
        self.clock = clock

    def check(self, action: dict[str, Any]) -> Verdict:
        h = action_hash(action)
        spec = KINDS.get(action["kind"])
        if spec is None:
            return Verdict(
                False,
                True,
                "unknown",
                h,
                [f"unknown action kind '{action['kind']}' (known: {', '.join(KINDS)})"],
            )
        physical, risk, targets = spec
        reasons = []
        target = action["target"]
        if _kind_of(target) not in targets:
            reasons.append(
                f"{action['kind']} cannot target a {_kind_of(target)} (allowed: {', '.join(targets)})"
            )
        elif (
            not target.startswith(("job:", "policy:")) and target != "fleet" and target not in self.components
        ):
            reasons.append(f"no component '{target}' in the topology")
        fraction = action.get("parameters", {}).get("fraction_of_tdp")
        if fraction is not None and not (isinstance(fraction, int | float) and 0.3 <= fraction <= 1.0):
            reasons.append("fraction_of_tdp must be within [0.3, 1.0]")
        return Verdict(not reasons, physical, risk, h, reasons)

    def request(self, proposal_id: str, action: dict[str, Any], reason: str) -> float | None:
        book = self.approvals.load()
        if proposal_id not in book:
            now = self.clock()
            book[proposal_id] = {
                "action_hash": action_hash(action),
                "requested_ts_s": now,
                "expires_ts_s": now + self.ttl_s,
                "status": "requested",
                "reason": reason,
            }
            self.approvals.save(book)
        return float(book[proposal_id]["expires_ts_s"])

    def approve(self, proposal_id: str, by: str) -> None:
        book = self.approvals.load()
        entry = book.get(proposal_id)
        if entry is None:
            raise ApprovalRefused("unknown", f"{proposal_id}: no approval was requested")
        if not by:
            raise ApprovalRefused("anonymous", "an approval needs a person's name")
        if entry["status"] == "approved":
            return
        if entry["status"] != "requested":
            raise ApprovalRefused(entry["status"], f"{proposal_id} is already {entry['status']}")
        if self.clock() > entry["expires_ts_s"]:
            entry["status"] = "expired"
            self.approvals.save(book)
            raise ApprovalRefused(
                "expired", f"{proposal_id}: the approval window closed; ask again for a fresh proposal"
            )
        entry.update(status="approved", by=by, approved_ts_s=self.clock())
        self.approvals.save(book)

    def reject(self, proposal_id: str, by: str, reason: str) -> None:
        book = self.approvals.load()
        if proposal_id in book and book[proposal_id]["status"] == "requested":
            book[proposal_id].update(status="rejected", by=by, reason=reason)
            self.approvals.save(book)

    def execute(self, proposal_id: str, action: dict[str, Any]) -> dict[str, Any]:
        ledger = self.ledger.load()
        if proposal_id in ledger:
            return {**ledger[proposal_id], "already_executed": True}
        entry = self.approvals.load().get(proposal_id)
        if entry is None or entry["status"] != "approved" or not entry.get("by"):
            raise ExecutionRefused("unapproved", f"{proposal_id}: no recorded approval by a person")
        if entry["action_hash"] != action_hash(action):
            raise ExecutionRefused("mismatch", f"{proposal_id}: the action differs from the one approved")
        if action["kind"] not in SIM_KINDS:
            raise ExecutionRefused("unsupported", f"the simulator has no actuator for {action['kind']}")
        if self.twin is None:
            raise ExecutionRefused(
                "no_backend", "no actuator backend (start the chat with --scenario for the twin)"
            )
        ledger[proposal_id] = {"state": "started", "ts_s": self.clock()}
        self.ledger.save(ledger)  # a crash from here on never runs the action a second time
        result = sim_actuate(self.twin.world, action)
        self.twin.save()
        ledger[proposal_id] = {
            "state": "done",
            "ts_s": self.clock(),
            "result": result,
            "approved_by": entry["by"],
        }
        self.ledger.save(ledger)
        return dict(ledger[proposal_id])
