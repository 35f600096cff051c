"""What a standing runbook (`guardrails.runbook`) authorises in a workspace, and the recount from the audit log.

- `runbook_standing`: the configured file read and hashed now, and judged as `aiops policy status` judges a
  response policy (`guardrails.standing.standing_status`: verified signatures, the chain and its witness
  intact, enough people, unexpired, not revoked); a file edited after signing, expired or revoked is not
  standing, and `problem` says why.
- `step_facts`: the plan step a proposal belongs to, as the workspace's `plans`/`plan_steps` hold it.
- `runbook_authorisation`: the `Authorisation` the approval book gives a target of a covered step: the entry
  covers the step's root cause, rung, every target's kind and scope and its blast radius (nodes), its runs in
  the last hour are under `max_runs_per_h`, and as many people approved the runbook as this action needs
  (two-person kinds and cross-rack scopes). It carries the audit record (`runbook_cover`) the executor writes
  before it runs and the stamp (file sha256, entry, step, approvers) it writes into the execution.
- `runbook_run_authorised`: an execution row proven from the audit log alone (`unsafe_executions`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiops.errors import ResponsePolicyError
from aiops.store import Store
from guardrails.actions import Action, action_hash
from guardrails.approvals import Authorisation
from guardrails.audit import AuditLog, AuditRow
from guardrails.runbook import LoadedRunbook, RunbookEntry, StepFacts, covers, load_runbook
from guardrails.signing import Verifier
from guardrails.standing import PolicyStatus, policy_status, standing_status
from guardrails.topology import Topology

HOUR_S = 3600.0
RECORD = "runbook_cover"


@dataclass(frozen=True)
class RunbookStanding:
    path: str
    loaded: LoadedRunbook | None
    status: PolicyStatus | None
    problem: str  # "" when steps it covers may run now; else why nothing runs under it

    @property
    def ok(self) -> bool:
        return not self.problem and self.loaded is not None and self.status is not None


def _clock(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def runbook_standing(audit: AuditLog, path: str, now_ts_s: float, verifier: Verifier) -> RunbookStanding:
    """The configured runbook now: its bytes as they are on disk, and their approval in the audit log."""
    try:
        loaded = load_runbook(path)
    except ResponsePolicyError as exc:
        return RunbookStanding(path, None, None, f"runbook {path}: {exc}")
    status = standing_status(
        audit, loaded.sha256, loaded.approvals_required, now_ts_s, verifier, document="runbook"
    )
    short = f"runbook {path} ({loaded.sha256[:12]})"
    problem = ""
    if not status.approved:
        problem = f"{short}: {status.message.removeprefix(f'policy {loaded.sha256[:12]} ')}"
        if status.approved_elsewhere:
            problem += "; the file was changed after it was signed: sign the new content or restore it"
    elif loaded.runbook.expires_ts_s is not None and now_ts_s >= loaded.runbook.expires_ts_s:
        problem = f"{short}: expired at {_clock(loaded.runbook.expires_ts_s)} (its `expires`)"
    return RunbookStanding(path, loaded, status, problem)


def step_facts(store: Store, step_id: str, topology: Topology) -> StepFacts | None:
    """The step's root cause, rung, status and targets (kinds and scopes) from the workspace's plan rows."""
    rows = store.query(
        "SELECT p.root_cause, s.kind, s.status, s.actions FROM plan_steps s JOIN plans p USING (plan_id) "
        "WHERE s.step_id = ?",
        [step_id],
    )
    if not rows:
        return None
    row = rows[0]
    label, step_kind, status, actions_json = row["root_cause"], row["kind"], row["status"], row["actions"]
    try:
        actions = json.loads(actions_json) if isinstance(actions_json, str) else []
    except ValueError:
        actions = []
    if not isinstance(actions, list) or not actions:
        return None
    kinds = tuple(str(a.get("kind", "")) if isinstance(a, dict) else "" for a in actions)
    scopes = tuple(
        topology.expand(str(a.get("target", ""))) if isinstance(a, dict) else None for a in actions
    )
    return StepFacts(step_id, str(label), str(step_kind), str(status), kinds, scopes)


def entry_for(loaded: LoadedRunbook, facts: StepFacts) -> tuple[RunbookEntry | None, str]:
    """The first entry covering the step, or None and why none does."""
    reasons = []
    for entry in loaded.runbook.entries:
        problem = covers(entry, facts)
        if problem is None:
            return entry, ""
        reasons.append(f"{entry.entry_id}: {problem}")
    return None, "; ".join(reasons)


def runs_in_hour(rows: Sequence[AuditRow], sha256: str, entry_id: str, now_ts_s: float, step_id: str) -> int:
    """Steps run under this entry of this file in the hour before `now_ts_s` (other than `step_id`)."""
    steps: set[str] = set()
    for row in rows:
        record = row.data().get(RECORD) if row.event == "validation" else None
        if (
            isinstance(record, dict)
            and record.get("runbook_sha256") == sha256
            and record.get("entry_id") == entry_id
            and now_ts_s - HOUR_S < row.ts_s <= now_ts_s
            and record.get("step_id") != step_id
        ):
            steps.add(str(record.get("step_id")))
    return len(steps)


def runbook_authorisation(
    standing: RunbookStanding,
    facts: StepFacts,
    action: Action,
    people: Authorisation,
    rows: Sequence[AuditRow],
    now_ts_s: float,
) -> tuple[Authorisation | None, str]:
    """The runbook's authorisation of this target of the step, or None and why it does not run."""
    if not standing.ok:
        return None, standing.problem
    assert standing.loaded is not None and standing.status is not None
    loaded, status = standing.loaded, standing.status
    if action.kind not in facts.kinds:
        return None, f"{action.kind} is not one of step {facts.step_id}'s actions"
    entry, why = entry_for(loaded, facts)
    if entry is None:
        return None, f"outside runbook {loaded.sha256[:12]} ({why})"
    if len(status.approvers) < people.needed:
        return None, (
            f"{action.kind} on {action.target[:60]} needs {people.needed} people; runbook {loaded.sha256[:12]} "
            f"was approved by {len(status.approvers)}"
        )
    ran = runs_in_hour(rows, loaded.sha256, entry.entry_id, now_ts_s, facts.step_id)
    if ran >= entry.max_runs_per_h:
        return (
            None,
            f"runbook entry {entry.entry_id} ran {ran} step(s) in the last hour (max {entry.max_runs_per_h})",
        )
    expiries = [t for t in (status.expires_ts_s, loaded.runbook.expires_ts_s) if t is not None]
    stamp = {
        "runbook_sha256": loaded.sha256,
        "entry_id": entry.entry_id,
        "step_id": facts.step_id,
        "approved_by": list(status.approvers),
        "path": loaded.path,
    }
    record = {
        RECORD: {
            "ok": True,
            **stamp,
            "label": facts.label,
            "step_kind": facts.step_kind,
            "action_hash": action_hash(action),
            "expires_ts_s": min(expiries) if expiries else None,
            "runs_in_hour": ran,
        }
    }
    message = (
        f"runbook {loaded.sha256[:12]} entry {entry.entry_id} (approved by {', '.join(status.approvers)}) covers "
        f"step {facts.step_id}"
    )
    auth = Authorisation(
        True,
        people.needed,
        status.approvers,
        message,
        standing={"record": record, "stamp": stamp, "key": "runbook"},
    )
    return auth, ""


# -- the recount ------------------------------------------------------------------------------------------
def _cover_record(rows: Sequence[AuditRow], row: AuditRow, digest: str) -> dict[str, Any] | None:
    for r in rows:
        if r.event != "validation" or r.proposal_id != row.proposal_id or r.seq >= row.seq:
            continue
        record = r.data().get(RECORD)
        if isinstance(record, dict) and record.get("ok") is True and record.get("action_hash") == digest:
            return record
    return None


def _approved_entry(
    rows: Sequence[AuditRow], row: AuditRow, sha256: str, entry_id: str
) -> dict[str, Any] | None:
    for r in reversed(rows):
        if r.event != "policy_approval" or r.seq >= row.seq:
            continue
        data = r.data()
        if data.get("policy_sha256") != sha256 or data.get("decision") != "approve":
            continue
        entry = (data.get("automatic") or {}).get(entry_id)
        if isinstance(entry, dict):
            return entry
    return None


def runbook_run_authorised(rows: Sequence[AuditRow], row: AuditRow) -> bool:
    """An `execution` row that ran under a runbook, proven from the log: its `runbook_cover` recorded before it
    ran for this action's hash; the file approved by enough people, unexpired and unrevoked, before it ran; and
    the step's root cause, rung and the execution's kind inside the entry those approvals recorded."""
    data = row.data()
    record = _cover_record(rows, row, str(data.get("action_hash", "")))
    if record is None:
        return False
    sha256 = str(record.get("runbook_sha256", ""))
    status = policy_status(rows, sha256, 1, row.ts_s, before_seq=row.seq)
    expires = record.get("expires_ts_s")
    if not status.approved or len(status.approvers) < int(data.get("approvals_needed", 1)):
        return False
    if isinstance(expires, int | float) and row.ts_s >= expires:
        return False
    entry = _approved_entry(rows, row, sha256, str(record.get("entry_id", "")))
    return (
        entry is not None
        and record.get("label") in entry.get("labels", ())
        and record.get("step_kind") in entry.get("steps", ())
        and data.get("kind") in entry.get("kinds", ())
    )
