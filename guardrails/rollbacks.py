"""The recorded rollback of an executed action, as new proposals: what restores the state its execution read
back before it changed anything (`previous` in its execution record). A rollback is an ordinary proposal
(validated, approved by a person's signature, executed once, audited); its `origin` is `rollback:<original
id>`, and the original's audit trail gets a `rollback_filed` event naming it.

| executed kind | previous state recorded | rollback proposals |
| --- | --- | --- |
| `set_power_limit`, `reset_power_limit` | each GPU's limit (W) read before the change | back to the default: `reset_power_limit` on the target (a rack or the fleet: per node); one value: `set_power_limit` of it on the target; several: one `set_power_limit` per GPU |
| `drain_node` | drained or not (the twin), Slurm's drain flag, Kubernetes' cordon | `resume_node` (Slurm `state=resume`, an uncordon), unless it was drained already |
| `resume_node` | the drain it lifted | `drain_node` |
| `set_cooling_state` | the cooling fraction before | `set_cooling_state` of it, when one value was recorded |
| anything else (`gpu_reset`, `reboot_node`, `restart_job`, `migrate_job`, clocks, fans, digital kinds) | | none: refused, saying why |

Pure: built from the execution's record, the topology and each GPU's default limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiops.errors import GuardrailError
from guardrails.actions import Action
from guardrails.envelope import GpuPower
from guardrails.topology import Topology

TOLERANCE_W = 1.0
NOT_UNDONE: dict[str, str] = {
    "gpu_reset": "a GPU reset cannot be undone",
    "reboot_node": "a reboot cannot be undone",
    "restart_job": "a requeue or restart cannot be undone",
    "migrate_job": "a moved job is not moved back by a rollback: propose the move you want",
    "set_clock_limit": "no action kind restores locked clocks yet (nvmlDeviceResetGpuLockedClocks)",
    "set_fan_speed": "no action kind restores the default fan policy yet",
}


@dataclass(frozen=True)
class Restore:
    kind: str
    target: str
    parameters: dict[str, Any]
    restores: str  # what it puts back, for people


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _power(
    original: Action, previous: Mapping[str, Any], topology: Topology, gpus: Mapping[str, GpuPower]
) -> list[Restore]:
    limits = previous.get("power_limit_w")
    if not isinstance(limits, dict) or not limits:
        raise GuardrailError("rollback", f"{original.proposal_id}: no previous power limits were recorded")
    watts = {str(g): _number(w) for g, w in limits.items()}
    if any(w is None for w in watts.values()):
        raise GuardrailError("rollback", f"{original.proposal_id}: a recorded previous limit is not a number")
    known = {g: float(w) for g, w in watts.items() if w is not None}
    at_default = all(g in gpus and abs(w - gpus[g].tdp_w) <= TOLERANCE_W for g, w in known.items())
    scope = topology.expand(original.target)
    if at_default:
        if scope is not None and scope.kind in ("gpu", "node"):
            return [Restore("reset_power_limit", original.target, {}, "the default power limit")]
        nodes = sorted({g.split("/", 1)[0] for g in known})
        return [Restore("reset_power_limit", n, {}, "the default power limit") for n in nodes]
    values = {round(w) for w in known.values()}
    if len(values) == 1:
        value = values.pop()
        return [Restore("set_power_limit", original.target, {"power_limit_w": value}, f"{value} W")]
    return [
        Restore("set_power_limit", g, {"power_limit_w": round(w)}, f"{round(w)} W")
        for g, w in sorted(known.items())
    ]


def _node_service(original: Action, previous: Mapping[str, Any]) -> Restore:
    """A drain's rollback resumes the node, a resume's drains it again: unless it was so already before."""
    was = previous.get("drained", previous.get("drain", previous.get("unschedulable")))
    draining = original.kind == "drain_node"
    if was is None and draining:
        raise GuardrailError("rollback", f"{original.proposal_id}: the node's state before was not recorded")
    if bool(was) == draining:
        state = "drained" if draining else "in service"
        raise GuardrailError(
            "rollback", f"{original.target} was {state} before {original.proposal_id}: nothing to undo"
        )
    reason = {"reason_code": f"rollback {original.proposal_id}"[:64]}
    if draining:
        return Restore("resume_node", original.target, reason, "in service")
    return Restore("drain_node", original.target, reason, "drained")


def restores_of(
    original: Action, previous: Mapping[str, Any], topology: Topology, gpus: Mapping[str, GpuPower]
) -> list[Restore]:
    """The actions that put back what `original`'s execution changed; `GuardrailError` when none can."""
    kind = original.kind
    if kind in ("set_power_limit", "reset_power_limit"):
        return _power(original, previous, topology, gpus)
    if kind in ("drain_node", "resume_node"):
        return [_node_service(original, previous)]
    if kind == "set_cooling_state":
        fraction = _number(previous.get("cooling_fraction"))
        if fraction is None:
            raise GuardrailError(
                "rollback", f"{original.proposal_id}: no single previous cooling fraction was recorded"
            )
        return [
            Restore(
                "set_cooling_state", original.target, {"cooling_fraction": fraction}, f"cooling {fraction:g}"
            )
        ]
    why = NOT_UNDONE.get(kind, f"{kind} has no recorded rollback")
    raise GuardrailError("rollback", f"{original.proposal_id}: {why}")


def rollback_actions(
    original: Action,
    previous: Mapping[str, Any],
    topology: Topology,
    gpus: Mapping[str, GpuPower],
    now_ts_s: float,
    attempt: int = 1,
) -> list[Action]:
    """The rollback proposals of an executed `original` (ids `<original>-rb<attempt>[.<n>]`, proposed by the
    analyst: the deterministic undo of a record, waiting for a person's signature like any physical proposal)."""
    restores = restores_of(original, previous, topology, gpus)
    base = f"{original.proposal_id[:68]}-rb{attempt}"
    return [
        Action(
            proposal_id=f"{base}.{i}" if len(restores) > 1 else base,
            kind=r.kind,
            target=r.target,
            parameters=r.parameters,
            reason=f"rollback of {original.proposal_id} ({original.kind} on {original.target}): restore {r.restores}, "
            "as read back before it ran",
            evidence=[f"execution of {original.proposal_id}: previous state {dict(previous)}"[:500]],
            expected_effect=f"{r.target} back to {r.restores}",
            rollback={"kind": original.kind, "target": original.target, "parameters": original.parameters},
            proposed_by="analyst",
            created_ts_s=now_ts_s,
        )
        for i, r in enumerate(restores, start=1)
    ]
