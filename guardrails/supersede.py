"""Duplicates across tiers, closed: when one tier executes an action, the same action (kind, target,
parameters: the action hash) still open on the other tier becomes `superseded`, audited as `supersede`.

- On a node: a proposal the fleet dispatched runs here (guardrails/dispatched.py through `Guardrails.execute`);
  the node's own open proposal of the same action (its service filed it from the same symptoms) is closed, so
  nobody approves a cap that is already in place. Any execution does the same: within one workspace the desk
  files no duplicate, so only the other tier's (and a response policy's) copies are ever closed.
- On the fleet: a node agent exports what it executed (`aiops_intended_state*`, into `intended_exports`); the
  fleet's open proposal of the same action on that node's own components is closed (`supersede_exported`).
  An export is a node's word about itself only: a node cannot close a proposal on another node's components,
  except a job's restart without itself (`restart_job` with `exclude` naming the node): a node agent may run
  that restart itself (guardrails/dispatched.py `NODE_JOB_KINDS`), so it may say it did.
"""

from __future__ import annotations

from aiops.store import Store
from guardrails.actions import Action
from guardrails.audit import AuditLog
from guardrails.context import topology_from_store
from guardrails.records import GuardrailRecords
from guardrails.topology import Scope


def supersede(
    records: GuardrailRecords,
    audit: AuditLog,
    digest: str,
    *,
    by: str,
    where: str,
    now_ts_s: float,
    keep: str = "",
) -> list[str]:
    """Close every open proposal of action hash `digest` (but `keep`) as superseded by `by` (a proposal id),
    which ran `where`; returns the ids closed."""
    closed = []
    for record in records.open_with_hash(digest):
        if record.proposal_id == keep:
            continue
        message = f"superseded: the same action ran {where} as {by[:80]}; nothing left to approve"
        records.set_status(record.proposal_id, "superseded", now_ts_s, message)
        audit.append(
            "supersede",
            {"by": by, "where": where, "action_hash": digest, "was": record.status},
            proposal_id=record.proposal_id,
            actor="guardrails",
            ts_s=now_ts_s,
        )
        closed.append(record.proposal_id)
    return closed


def _off_itself(action: Action, scope: Scope, node: str) -> bool:
    """A job's restart without `node` (once restarted, the job has no rank there to show who carried it)."""
    return action.kind == "restart_job" and scope.kind == "job" and action.parameters.get("exclude") == node


def supersede_exported(store: Store, now_ts_s: float, *, wall_ts_s: float) -> list[str]:
    """The fleet's open proposals whose exact action a node agent exported as executed (and still in force):
    closed as superseded. `now_ts_s`: the telemetry's clock (what the exports are dated on); `wall_ts_s`: the
    desk's clock for the status and audit rows."""
    rows = store.query(
        "SELECT DISTINCT x.node, x.action_hash, x.proposal_id FROM intended_exports x "
        "JOIN proposals p ON p.action_hash = x.action_hash "
        "WHERE p.status IN ('pending', 'approved') AND x.set_ts_s <= ? AND x.expires_ts_s > ?",
        [now_ts_s, now_ts_s],
    )
    if not rows:
        return []
    records, audit = GuardrailRecords(store), AuditLog(store)
    topology = topology_from_store(store)
    closed: list[str] = []
    for row in rows:
        node, digest = str(row["node"]), str(row["action_hash"])
        for record in records.open_with_hash(digest):
            scope = topology.expand(record.action.target)
            if scope is None or not (list(scope.nodes) == [node] or _off_itself(record.action, scope, node)):
                continue  # a node speaks for its own components only
            closed += supersede(
                records,
                audit,
                digest,
                by=str(row["proposal_id"]),
                where=f"on {node}",
                now_ts_s=wall_ts_s,
            )
    return closed
