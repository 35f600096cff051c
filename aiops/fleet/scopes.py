"""Where an approved fleet proposal is carried out, by its target's scope (aiops/fleet/dispatch.py sends it):

| target | kinds | carried out by | signatures checked |
| --- | --- | --- | --- |
| a GPU, NIC or node of one host | every kind | that host's node agent (`POST /api/dispatch`) | on the node, against its own allowed-signers |
| a rack, the fleet | `set_power_limit` (guardrails.dispatched `FAN_OUT_KINDS`) | every node agent of the rack (fleet), each on its own GPUs: the DCIM-style cap fanned out | on each node, each checking the target covers it |
| `job:<name>` | `restart_job` (`SCHEDULER_JOB_KINDS`) | the cluster's scheduler from the fleet (`[fleet.scheduler]`: Slurm's `scontrol requeue`, Kubernetes' pod deletion through the official client) | on the fleet, where it lands (its `Guardrails.execute`) |
| `job:<name>`, `[fleet] job_steps = "node_agent"` | `restart_job` | one node agent of the job (its first host in the topology that the step does not `exclude`), through that node's own executors (its `[scheduler]`, its twin) | on that node, which checks the job has a rank there |
| anything else | | nobody: the proposal stays approved and says why | |

`scheduler_actuator(config)` builds the fleet's scheduler client: job kinds only, never a node's (a node's drain
goes to its own agent, which runs its own scheduler client and checks its own people).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.config import SchedulerConfig
from aiops.errors import PrerequisiteError
from aiops.labels import node_of
from aiops.store import Store
from guardrails.actions import Action, canonical_json
from guardrails.actuators_k8s import KubernetesActuator, core_api
from guardrails.actuators_slurm import SlurmActuator
from guardrails.audit import AuditLog
from guardrails.context import topology_from_store
from guardrails.dispatched import FAN_OUT_KINDS, NODE_JOB_KINDS
from guardrails.policy import ExecutionRecord
from guardrails.records import GuardrailRecords, ProposalRecord
from guardrails.routing import Route as Backend
from guardrails.routing import RoutingActuator
from guardrails.topology import Topology

SCHEDULER_JOB_KINDS: tuple[str, ...] = ("restart_job",)
NODE_SCOPES = ("node", "gpu", "nic")
DISPATCHED = "dispatch_result"
MAX_PREVIOUS_CHARS = 16 * 1024  # a node's recorded previous state, as kept for a rollback


@dataclass(frozen=True)
class Route:
    how: str  # node | nodes | scheduler | none
    hosts: tuple[str, ...] = ()
    why: str = ""  # for `none`: what would carry it out, and that nothing does


def route_of(action: Action, topology: Topology, scheduler_kind: str, job_steps: str = "scheduler") -> Route:
    scope = topology.expand(action.target)
    if scope is None:
        return Route("none", why=f"{action.target[:80]} is not in the fleet's topology")
    if scope.kind in NODE_SCOPES and len(scope.nodes) == 1:
        return Route("node", scope.nodes)
    if scope.kind in ("rack", "fleet") and action.kind in FAN_OUT_KINDS:
        if not scope.nodes:
            return Route("none", why=f"{action.target[:80]} holds no node agent")
        return Route("nodes", tuple(scope.nodes))
    if scope.kind == "job" and action.kind in NODE_JOB_KINDS and job_steps == "node_agent":
        excluded = node_of(str(action.parameters.get("exclude") or ""))
        hosts = [h for h in scope.nodes if h != excluded]
        if not hosts:
            return Route("none", why=f"{action.target[:80]} has no node agent left to restart it")
        return Route("node", (hosts[0],))
    if scope.kind == "job" and action.kind in SCHEDULER_JOB_KINDS:
        if scheduler_kind == "none":
            return Route(
                "none",
                why=f"{action.kind} of {action.target[:80]} runs through the cluster's scheduler: "
                '[fleet.scheduler] kind is none (or [fleet] job_steps = "node_agent": a node agent of the job)',
            )
        return Route("scheduler")
    return Route(
        "none",
        why=f"no actor carries out {action.kind} on a {scope.kind} from the fleet (node agents act on their "
        f"own components; rack and fleet power caps fan out to them; {', '.join(SCHEDULER_JOB_KINDS)} of a job "
        "runs through [fleet.scheduler])",
    )


def scheduler_actuator(config: SchedulerConfig, kube_api: Any = None) -> RoutingActuator | None:
    """The fleet's scheduler client for job kinds (None for `none`); `PrerequisiteError` when it cannot be made."""
    if config.kind == "slurm":
        binaries = Path(config.binaries) if config.binaries else None
        slurm = SlurmActuator(config.node_name or "fleet", binaries, timeout_s=config.timeout_s)
        routes = {kind: Backend("slurm", slurm, remote=True) for kind in SCHEDULER_JOB_KINDS}
        return RoutingActuator(routes, describe="the cluster's Slurm (scontrol), from the fleet")
    if config.kind == "kubernetes":
        try:
            api = (
                kube_api
                if kube_api is not None
                else core_api(config.kubeconfig, in_cluster=config.in_cluster or not config.kubeconfig)
            )
        except Exception as exc:
            raise PrerequisiteError(
                f'[fleet.scheduler] kind = "kubernetes": no API client ({type(exc).__name__}: {exc})'
            ) from None
        k8s = KubernetesActuator(api, "", timeout_s=config.timeout_s)
        routes = {kind: Backend("kubernetes", k8s, remote=True) for kind in SCHEDULER_JOB_KINDS}
        return RoutingActuator(routes, describe="the cluster's Kubernetes API, from the fleet")
    return None


def node_status(http_status: int, result: dict[str, Any]) -> str:
    """One node's answer as an outcome: executed | failed | refused."""
    if http_status == 200 and result["status"] in ("executed", "failed"):
        return str(result["status"])
    if http_status == 409 and result["previous"] == "executed":
        return "executed"  # it ran on the node at an earlier dispatch whose answer was lost
    return "refused"


def node_previous(answer: dict[str, Any]) -> dict[str, Any]:
    """The state the node read before it acted (its answer's `result.previous`), bounded: what a rollback of
    the fleet's proposal restores. Hostile data: a rollback built from it is validated and signed anew."""
    result = answer.get("result")
    previous = result.get("previous") if isinstance(result, dict) else None
    if not isinstance(previous, dict) or len(canonical_json(previous)) > MAX_PREVIOUS_CHARS:
        return {}
    return previous


def answered_hosts(audit: AuditLog, proposal_id: str) -> set[str]:
    """The hosts whose answer to this proposal's dispatch is recorded."""
    return {r.actor.removeprefix("node:") for r in audit.rows(proposal_id, DISPATCHED)}


def _merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Each node's previous state in one (`power_limit_w` per GPU across the rack's nodes)."""
    merged: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged.setdefault(key, value)
    return merged


def settle(store: Store, record: ProposalRecord, hosts: tuple[str, ...], now: float) -> str:
    """Every node of the scope answered: the proposal's outcome (executed where every node executed; failed
    when one failed, or when some executed and others refused; refused when none ran), its message, and the
    fleet's ledger entry with the units of the nodes where it ran (its rate limits and breaker count them)."""
    records, audit, pid = GuardrailRecords(store), AuditLog(store), record.proposal_id
    answers = {r.actor.removeprefix("node:"): r.data() for r in audit.rows(pid, DISPATCHED)}
    outcomes = {h: str(answers.get(h, {}).get("outcome", "refused")) for h in hosts}
    ran = [h for h in hosts if outcomes[h] in ("executed", "failed")]
    if all(o == "executed" for o in outcomes.values()):
        status = "executed"
    elif ran:
        status = "failed"
    else:
        status = "refused"
    if len(hosts) == 1:
        host = hosts[0]
        message = f"{host}: {answers[host].get('status') or status}: {answers[host].get('message', '')}"
    else:
        by = {o: [h for h in hosts if outcomes[h] == o] for o in ("executed", "failed", "refused")}
        message = f"{len(by['executed'])} of {len(hosts)} nodes executed" + "".join(
            f"; {o} on {', '.join(hs[:8])}" for o, hs in by.items() if hs and o != "executed"
        )
        refusal = next((answers[h].get("message", "") for h in by["refused"]), "")
        message += f" ({refusal})" if refusal else ""
    if ran:
        topology = topology_from_store(store)
        scope = topology.expand(record.action.target)
        if len(hosts) == 1 and scope is not None:
            units = scope.units
        else:
            scopes = [topology.expand(h) for h in ran]
            units = frozenset(u for s in scopes if s is not None for u in s.units) or frozenset(ran)
        result = {
            "hosts": {h: outcomes[h] for h in hosts},
            "node_previous": _merged([answers[h].get("node_previous") or {} for h in ran]),
            **(
                {k: answers[hosts[0]].get(k) for k in ("node", "status", "message")}
                if len(hosts) == 1
                else {}
            ),
        }
        entry = ExecutionRecord(
            pid, record.action.kind, record.action.target, units, now, record.action.parameters
        )
        if records.claim(entry):
            records.finish(pid, "executed" if status == "executed" else "failed", result)
    records.set_status(pid, status, now, message[:500])
    return status


def node_answers(store: Store, proposal_id: str) -> dict[str, dict[str, Any]]:
    """Each node's recorded answer to the proposal's dispatch (for people: `aiops actions show`, the console)."""
    return {
        r.actor.removeprefix("node:"): json.loads(r.payload)
        for r in AuditLog(store).rows(proposal_id, DISPATCHED)
    }
