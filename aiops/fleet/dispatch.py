"""Approved fleet proposals, sent to the node agent that acts on them (`POST /api/dispatch`), and the node's
answer recorded in the fleet's own audit chain.

The fleet service has no actuator and cannot approve for anyone: it sends the proposal as it filed it and the
people's SSH signatures, and the node checks them against its own allowed-signers (guardrails/dispatched.py).
Each flush of `aiops fleet`, `FleetDispatcher` takes the proposals that are `approved`:

- only signed `approval` events (and `step_approval` events naming the proposal: one signature over a plan
  step, sent with the step's id and targets) that verify here and are SSH signatures are sent; a proposal
  approved only with console sessions (the fleet's own key, which no node can check) is not sent, and its
  status message says so (`CONSOLE_ONLY`);
- the node is the target's host (a GPU, NIC or node of one host; rack, job and fleet targets have no node
  agent to act, and say so): the host the fleet's topology gives, which is the host the target's name holds
  (aiops/fleet/names.py). Its URL is `[fleet.nodes]` host -> URL, else `[fleet] node_url` with `{host}` filled
  with a valid host name only (`NodeDirectory`): no label, URL, path or `#` from telemetry can choose where a
  dispatch goes. The node's /api token is that host's own file in `[fleet] node_token_dir` when set (a token sent
  to one node opens no other), else the one of `[fleet] node_token_file`, sent only to those URLs;
- a `dispatch` audit event is written before each attempt, a `dispatch_result` one with the node's answer
  (status, message, rule, the node's audit seq and hash) when it answers; the proposal becomes `executed`,
  `failed` or `refused`, and an executed one joins the fleet's execution ledger (its rate limits count it).
  A 409 replay whose earlier run executed counts as executed (the fleet crashed between sending and recording).
- no answer, 401, 5xx: retried after `RETRY_S`, doubled at each failure up to `MAX_RETRY_S` (each attempt is
  a `dispatch` event), at most `MAX_PER_FLUSH` sends per flush. The answer is
  hostile data: JSON-decoded, size-capped, each field cut to length; the HTTP client (aiops/outbound.py)
  follows no redirect and bounds the whole exchange by `[fleet] dispatch_timeout_s`.

Three phases, so that no POST waits on a node while the workspace is held (the service's flush drives them,
aiops/service/flush_steps.py): `collect(store)` reads the workspace and makes each send ready (its `dispatch`
event written) and claims each scheduler step (`Guardrails.begin`), `send()` POSTs them and runs the steps
(scontrol, the Kubernetes API) with no store at all, `record(store)` writes the answers, executions and
read-backs (`Guardrails.finish`) and settles.
`run(store)` does all three at once, for a caller that holds no service's workspace (tests, one-off tools).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiops import outbound
from aiops.config import FleetConfig
from aiops.fleet.node_http import NodeAnswer, NodeDirectory, post_json
from aiops.fleet.scopes import (
    DISPATCHED,
    answered_hosts,
    node_previous,
    node_status,
    route_of,
    scheduler_actuator,
    settle,
)
from aiops.store import Store
from guardrails.actions import action_hash
from guardrails.actuators import ActuationResult
from guardrails.actuators_k8s import core_api
from guardrails.audit import AuditLog, step_rows_naming
from guardrails.breaker import OUT_KINDS
from guardrails.breaker_inputs import WAITING, HeldView
from guardrails.context import topology_from_store
from guardrails.decisions import check_row
from guardrails.executor import Claimed, ExecutionOutcome
from guardrails.peer import history_for
from guardrails.policy import validate
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords, ProposalRecord
from guardrails.routing import RoutingActuator
from guardrails.scheduler_view import view_reader
from guardrails.session_signing import is_session_signature
from guardrails.signing import ConfiguredVerifier, Verifier
from guardrails.step_message import EVENT as STEP_EVENT
from guardrails.topology import Topology

log = logging.getLogger("aiops.fleet")
CONSOLE_ONLY = (
    "approved in the console only: a node verifies SSH signatures; paste one (ssh-keygen -Y sign -n "
    "aiops-approval) on the proposal's page, or aiops actions approve --key"
)
RETRY_S = 30.0  # after a send without an answer; doubled each time, at most MAX_RETRY_S
MAX_RETRY_S = 3600.0
MAX_PER_FLUSH = 4


@dataclass
class Outgoing:
    """One node's dispatch, made ready with the workspace open and sent with it closed; `answer` once sent."""

    record: ProposalRecord
    host: str
    hosts: tuple[str, ...]  # every node of the proposal's scope: settled once each answered
    url: str
    body: dict[str, Any]
    token: str
    now: float
    answer: NodeAnswer | None = None


def _text(value: Any, limit: int = 300) -> str:
    return str(value)[:limit] if isinstance(value, str | int | float) else ""


class FleetDispatcher:
    """Sends the fleet workspace's approved proposals to their nodes (called once per flush)."""

    def __init__(
        self,
        fleet: FleetConfig,
        token: str = "",
        *,
        name: str = "fleet",
        post: Callable[[str, dict[str, Any], str, float], NodeAnswer] = post_json,
        clock: Callable[[], float] = time.time,
        kube_api: Any = None,
    ) -> None:
        self.fleet, self.token, self.name, self.post, self.clock = fleet, token, name, post, clock
        self.directory = NodeDirectory(fleet, token)
        self._retry_at: dict[str, float] = {}
        self._failures: dict[str, int] = {}  # sends without an answer in a row, per proposal (the backoff)
        self._verifier: Verifier | None = None
        self.outgoing: list[Outgoing] = []  # made ready by collect(), sent by send(), written by record()
        self.scheduled: list[
            Claimed
        ] = []  # scheduler steps claimed by collect(), run by send(), written by record()
        self.kube_api = kube_api  # tests: a CoreV1Api for [fleet.scheduler] kind = "kubernetes"
        self._scheduler: RoutingActuator | None = None
        reader = view_reader(
            fleet.scheduler.kind,
            binaries=fleet.scheduler.binaries,
            timeout_s=fleet.scheduler.timeout_s,
            kube_api=(lambda: kube_api) if kube_api is not None else self._kube,
        )
        # the scheduler's view the breaker counts: read by `read_views` (outside the workspace), never by a desk
        self.view = HeldView(reader) if reader is not None else None

    def __repr__(self) -> str:  # never the token
        return f"FleetDispatcher(node_url={self.fleet.node_url!r}, token=***)"

    def node_url(self, host: str) -> str | None:
        return self.directory.url(host)

    def _kube(self) -> Any:
        config = self.fleet.scheduler
        return core_api(config.kubeconfig, in_cluster=config.in_cluster or not config.kubeconfig)

    def run(self, store: Store, verifier: Verifier | None = None) -> list[str]:
        """Carry out what is due, each by its scope (aiops/fleet/scopes.py); returns the proposal ids settled
        (executed, failed or refused: every node of its scope answered, or the scheduler ran it). The POSTs
        run with `store` open: a service's flush calls the three phases instead (the module's docstring)."""
        self.read_views()
        ran = self.collect(store, verifier)
        self.send()
        return ran + self.record(store)

    def read_views(self) -> None:
        """Ask `[fleet.scheduler]` which nodes run no new work (`sinfo`, the Kubernetes node list), for the
        breaker of the next `collect`: a service calls this before its flush holds the workspace."""
        if self.view is not None:
            self.view.refresh()

    def send(self) -> int:
        """POST what `collect` made ready and run the scheduler steps it claimed, touching no store (the
        service's workspace is closed meanwhile); returns how many were sent or run. The answers wait in
        `outgoing` and `scheduled` for `record`."""
        sent = 0
        for step in self.scheduled:
            if step.result is None:
                step.act()
                sent += 1
        for one in self.outgoing:
            if one.answer is None:
                one.answer = self.post(one.url, one.body, one.token, self.fleet.dispatch_timeout_s)
                sent += 1
        return sent

    def record(self, store: Store) -> list[str]:
        """The answers `send` got, written (a `dispatch_result`, or a retry planned); returns the proposal ids
        settled (every node of the scope answered, or the scheduler ran it). A send not made yet stays for the
        next flush; a scheduler step claimed and never run is written as failed (its claim stands: no step
        runs twice)."""
        settled = [pid for pid in (self._ran(store, step) for step in self.scheduled) if pid]
        self.scheduled = []
        done, self.outgoing = (
            [o for o in self.outgoing if o.answer],
            [o for o in self.outgoing if not o.answer],
        )
        audit = AuditLog(store)
        for one in done:
            self._answered(store, one)
        for one in {o.record.proposal_id: o for o in done}.values():
            if set(one.hosts) <= answered_hosts(audit, one.record.proposal_id):
                settle(store, one.record, one.hosts, one.now)
                settled.append(one.record.proposal_id)
        return settled

    def collect(self, store: Store, verifier: Verifier | None = None) -> list[str]:
        """What is due, read from the workspace: node sends made ready in `outgoing` (each with its `dispatch`
        event), notes set; the scheduler's steps claimed in `scheduled` (run by `send`). Returns the proposal
        ids settled without a call (a step the scheduler cannot take)."""
        if self.outgoing or self.scheduled:  # a flush whose writing failed: written now
            self.record(store)
            self.outgoing = []
        if verifier is None:  # one per dispatcher: its verdicts are cached (each signature checked once)
            if self._verifier is None:
                self._verifier = ConfiguredVerifier(store.guardrails, store.path)
            verifier = self._verifier
        records, audit = GuardrailRecords(store), AuditLog(store)
        topology = topology_from_store(store)
        now = self.clock()
        answered: list[str] = []
        sent = 0
        for record in records.proposals("approved"):
            pid = record.proposal_id
            if sent >= MAX_PER_FLUSH:
                break
            if record.expires_ts_s is not None and now >= record.expires_ts_s:
                continue  # the desk's expiry marks it
            route = route_of(record.action, topology, self.fleet.scheduler.kind, self.fleet.job_steps)
            if route.how == "none":
                self._note(records, record, route.why, now)
                continue
            if route.how == "scheduler":
                sent += 1
                if self.on_scheduler(store, record):
                    answered.append(pid)
                continue
            done = answered_hosts(audit, pid)
            due = [h for h in route.hosts if h not in done and self._retry_at.get(f"{pid}@{h}", 0.0) <= now]
            if not due:
                continue
            approvals = self._ssh_approvals(audit, pid, verifier)
            have, needed = len({a["principal"] for a in approvals}), max(1, record.approvals_needed)
            if have < needed:
                note = (
                    CONSOLE_ONLY
                    if have == 0
                    else f"{have} of {needed} approvals are SSH-signed: {CONSOLE_ONLY}"
                )
                self._note(records, record, note, now)
                continue
            waiting = self.breaker_wait(store, record, now)
            if waiting:  # the fleet-wide count says no: nothing is sent until nodes return or an override
                self._note(records, record, waiting, now)
                continue
            for host in due[: MAX_PER_FLUSH - sent]:
                sent += 1
                self._prepare(store, record, approvals, (host, route.hosts), now, topology)
        return answered

    def on_scheduler(self, store: Store, record: ProposalRecord) -> bool:
        """A job step through the cluster's scheduler, from here: this desk checks the signatures (the action
        lands here), validates and claims it; `send` runs it (scontrol, the Kubernetes API) with no store and
        `record` reads back and audits. True when it settled without running (its outcome logged)."""
        if self._scheduler is None:
            self._scheduler = scheduler_actuator(self.fleet.scheduler, self.kube_api)
        if self._scheduler is None:
            return False
        begun = self._desk(store).begin(record.proposal_id)
        if isinstance(begun, Claimed):
            self.scheduled.append(begun)
            return False
        self._said(begun)
        return begun.status in ("executed", "failed")

    def _desk(self, store: Store) -> Guardrails:
        assert self._scheduler is not None
        return Guardrails(store, actuator=self._scheduler, clock=self.clock, scheduler_view=self.view)

    def _ran(self, store: Store, step: Claimed) -> str:
        """A scheduler step `send` ran, written in the workspace: the proposal id when it executed or failed."""
        if step.result is None:  # claimed, never run (a flush that failed between): a failure, not a rerun
            step.result = ActuationResult(
                False, error="claimed but not run: the flush stopped before the call"
            )
        outcome = self._desk(store).finish(step)
        self._said(outcome)
        return outcome.proposal_id if outcome.status in ("executed", "failed") else ""

    @staticmethod
    def _said(outcome: ExecutionOutcome) -> None:
        log.info(
            "scheduler",
            extra={
                "proposal_id": outcome.proposal_id,
                "status": outcome.status,
                "why": outcome.message[:200],
            },
        )

    def breaker_wait(self, store: Store, record: ProposalRecord, now: float) -> str:
        """Why the circuit breaker holds this proposal back fleet-wide ("" when it does not): the fleet counts
        every node's executions, its own and the scheduler's view, which no single node sees."""
        if record.action.kind not in OUT_KINDS:
            return ""
        guard = Guardrails(store, clock=self.clock, scheduler_view=self.view)
        validation = validate(record.action, guard.context(now))
        return WAITING + validation.message if validation.waiting else ""

    def _ssh_approvals(self, audit: AuditLog, pid: str, verifier: Verifier) -> list[dict[str, Any]]:
        """The proposal's signed approvals that verify here and that a node can verify (SSH, not session): its
        own, and each plan step's that names it (sent with the step's id and targets, which the node needs to
        rebuild the signed message and find its proposal named there)."""
        found = []
        for row in [*audit.rows(pid, "approval"), *step_rows_naming(audit.store, pid)]:
            data = row.data()
            signature = data.get("signature")
            if not isinstance(signature, str) or is_session_signature(signature):
                continue
            try:
                signed = check_row(row, verifier)
            except Exception:  # a row that does not hold is not sent (aiops audit verify reports it)
                continue
            one = {
                "principal": signed.principal,
                "ts_s": float(data["ts_s"]),
                "expires_ts_s": float(data["expires_ts_s"]),
                "signature": signature,
            }
            if row.event == STEP_EVENT:
                one["step"] = {"step_id": row.proposal_id, "targets": data["targets"]}
            found.append(one)
        return found

    @staticmethod
    def _note(records: GuardrailRecords, record: ProposalRecord, note: str, now: float) -> None:
        if record.message != note:
            records.set_status(record.proposal_id, "approved", now, note)

    def _prepare(
        self,
        store: Store,
        record: ProposalRecord,
        approvals: list[dict[str, Any]],
        where: tuple[str, tuple[str, ...]],
        now: float,
        topology: Topology,
    ) -> None:
        """One node's dispatch made ready in `outgoing` (its `dispatch` event written), or a note why not."""
        (host, hosts), records, pid = where, GuardrailRecords(store), record.proposal_id
        url, token = self.directory.url(host), self.directory.token_for(host)
        if url is None or token is None:
            missing = "a URL ([fleet.nodes] or node_url)" if url is None else "a token in node_token_dir"
            self._note(records, record, f"not sent: no {missing} for {host[:80]!r}", now)
            log.warning(
                "dispatch not sent", extra={"proposal_id": pid, "node": host[:80], "missing": missing}
            )
            return
        body = {
            "action": record.action.model_dump(mode="json"),
            "action_hash": action_hash(record.action),
            "expires_ts_s": record.expires_ts_s,
            "approvals": [
                {k: a[k] for k in ("ts_s", "expires_ts_s", "signature", "step") if k in a} for a in approvals
            ],
            "fleet": self.name,
            "history": history_for(records.history(), host, topology, now),
        }
        principals = sorted({a["principal"] for a in approvals})
        AuditLog(store).append(
            "dispatch",
            {"node": host, "url": outbound.safe_url(url), "signers": principals},
            proposal_id=pid,
            actor="fleet",
        )
        self.outgoing.append(Outgoing(record, host, hosts, url, body, token, now))

    def _answered(self, store: Store, one: Outgoing) -> bool:
        """One node's answer recorded as a `dispatch_result` (True), or a retry planned (False)."""
        records, audit, record, host, now = (
            GuardrailRecords(store),
            AuditLog(store),
            one.record,
            one.host,
            one.now,
        )
        pid, answer = record.proposal_id, one.answer
        assert answer is not None
        if answer.http_status is None or answer.http_status == 401 or answer.http_status >= 500:
            why = answer.error or _text(answer.body.get("error") or answer.body.get("message"))
            key = f"{pid}@{host}"
            self._failures[key] = failures = self._failures.get(key, 0) + 1
            self._retry_at[key] = now + min(RETRY_S * 2 ** (failures - 1), MAX_RETRY_S)
            self._note(
                records,
                record,
                f"dispatch to {host} failed ({answer.http_status or 'no answer'}: {why}); retrying",
                now,
            )
            log.warning("dispatch failed", extra={"proposal_id": pid, "node": host, "why": why[:200]})
            return False
        node = answer.body
        result = {
            "node": host,
            "http_status": answer.http_status,
            "status": _text(node.get("status"), 20),
            "message": _text(node.get("message") or node.get("error")),
            "rule": _text(node.get("rule"), 40),
            "previous": _text(node.get("previous"), 20),
            "approved_by": [_text(p, 64) for p in node.get("approved_by", [])][:8]
            if isinstance(node.get("approved_by"), list)
            else [],
            "node_audit_seq": node.get("audit_seq") if isinstance(node.get("audit_seq"), int) else None,
            "node_audit_hash": _text(node.get("audit_hash"), 64),
            "node_previous": node_previous(node),
        }
        status = node_status(answer.http_status, result)
        audit.append(DISPATCHED, {**result, "outcome": status}, proposal_id=pid, actor=f"node:{host}")
        log.info("dispatched", extra={"proposal_id": pid, "node": host, "outcome": status})
        return True
