"""The people of the operator's day: a loopback PagerDuty (Events API v2), the DCIM input the fleet reads, and a
scripted on-call who approves with a real SSH key.

`Receivers` is one HTTP server on 127.0.0.1: `POST /v2/enqueue` speaks PagerDuty's Events API v2 (routing key,
`event_action` trigger | acknowledge | resolve, `dedup_key`; 202 with the key, 400 with `errors` for a malformed
event) and keeps PagerDuty's alert semantics: a trigger opens an alert unless one with its dedup key is open (then
it is folded into it), acknowledge and resolve act on the open one. A page is an alert opened: that is when
PagerDuty notifies the person on call. `GET /dcim` answers the facility agent's DCIM document.

`OnCall` is the person: each page is looked at `delay_s` after it came (PagerDuty's payload names the node and the
incident); on the tier that paged, the incident's plans (`aiops.plans.plans`: a fleet incident may hold the plans
of two faults it gathered) are read and each plan's first proposed step approved with one `ssh-keygen -Y sign` per
approval the guardrails ask for (`aiops.runtime.actions.approve_step`: one signature over the whole step, all its
targets, as `aiops plans approve STEP` does; the tier's service runs it, or the fleet dispatches it, at its next
flush); `delay_s` after signing the person looks again. When that step failed (an `action_outcomes` verdict, a
target refused or expired, a target the product says nobody carries out (`NOBODY_RUNS`: approved, never run), or
the incident still open `retry_after_s` after the step ran) the next step is approved: the one the product
escalated to, or else the plan's next waiting step, asked for as `aiops plans propose STEP` does. An incident
without a plan (a condition such as a lost agent) has its pending proposals of one kind approved, one signature
each. A step that needs no approval (a ticket, a lane fix on a node agent) is run as `aiops actions execute` runs
it, in the same visit as the step to sign after it; on the fleet a lane or ECN fix is signed like a physical step
(the node runs only what people signed: `aiops.runtime.actions.step_targets`).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiops.errors import AiopsError, GuardrailError
from aiops.plans import plans
from aiops.runtime.actions import approve_step, propose_step, step_targets
from aiops.runtime.maintenance import open_window
from aiops.runtime.world import attach, desk
from aiops.sim.churn import Event
from aiops.store import Store
from guardrails.signing import SshSigner

EVENT_ACTIONS = ("trigger", "acknowledge", "resolve")
MAX_STEPS_A_VISIT = 4  # a visit runs the steps that need nobody, then signs one
LOOK_AGAIN_S = 15.0  # a step that neither worked nor failed yet is looked at again this much later


@dataclass
class Alert:
    dedup_key: str
    opened_ts_s: float
    summary: str
    source: str
    details: dict[str, Any]
    status: str = "triggered"  # triggered | acknowledged | resolved
    resolved_ts_s: float | None = None
    events: list[tuple[float, str]] = field(default_factory=list)  # (ts, event_action)


class PagerDuty:
    """PagerDuty's alert book, fed by Events API v2 bodies."""

    def __init__(self, routing_key: str) -> None:
        self.routing_key = routing_key
        self.lock = threading.Lock()
        self.alerts: list[Alert] = []  # every alert ever opened: each one a page
        self.open: dict[str, Alert] = {}
        self.events = 0
        self.rejected = 0

    def receive(self, body: Any, now_ts_s: float) -> tuple[int, dict[str, Any]]:
        problems = []
        if not isinstance(body, dict):
            return 400, {"status": "invalid event", "errors": ["the body is not a JSON object"]}
        if body.get("routing_key") != self.routing_key:
            problems.append("routing_key is not this integration's")
        action = body.get("event_action")
        if action not in EVENT_ACTIONS:
            problems.append(f"event_action must be one of {', '.join(EVENT_ACTIONS)}")
        key = body.get("dedup_key")
        payload = body.get("payload")
        if action == "trigger" and not (
            isinstance(payload, dict) and all(payload.get(k) for k in ("summary", "source", "severity"))
        ):
            problems.append("a trigger needs payload.summary, payload.source and payload.severity")
        if action != "trigger" and not isinstance(key, str):
            problems.append("dedup_key is required for acknowledge and resolve")
        if problems:
            with self.lock:
                self.rejected += 1
            return 400, {"status": "invalid event", "message": "Event object is invalid", "errors": problems}
        with self.lock:
            self.events += 1
            key = str(key) if key else f"generated-{self.events}"
            alert = self.open.get(key)
            if action == "trigger" and alert is None:
                assert isinstance(payload, dict)
                alert = Alert(
                    key,
                    now_ts_s,
                    str(payload["summary"]),
                    str(payload["source"]),
                    dict(payload.get("custom_details") or {}),
                )
                self.alerts.append(alert)
                self.open[key] = alert
            if alert is not None:
                alert.events.append((now_ts_s, str(action)))
                if action == "acknowledge" and alert.status == "triggered":
                    alert.status = "acknowledged"
                elif action == "resolve":
                    alert.status, alert.resolved_ts_s = "resolved", now_ts_s
                    self.open.pop(key, None)
        return 202, {"status": "success", "message": "Event processed", "dedup_key": key}


class Receivers:
    """The loopback server: PagerDuty at /v2/enqueue, the DCIM document at /dcim, the day's scraper's targets API
    at /api/v1/targets (`targets`: Prometheus's answer, where given), and a ticket system at
    /rest/api/2/issue (Jira's create-issue: 201 with the issue's key; `tickets(component)` is told the component
    the product filed it for, as a repair crew reads the ticket)."""

    def __init__(
        self,
        pagerduty: PagerDuty,
        dcim: Callable[[], dict[str, Any]],
        tickets: Callable[[str], None] | None = None,
        targets: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        book = pagerduty
        filed: list[dict[str, Any]] = []
        self.tickets = filed

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                if self.path not in ("/v2/enqueue", JIRA_ISSUE):
                    self._answer(404, {"status": "not found"})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    self._answer(400, {"status": "invalid event", "errors": ["malformed JSON"]})
                    return
                if self.path == JIRA_ISSUE:
                    self._answer(*_jira_issue(body, filed, tickets))
                    return
                self._answer(*book.receive(body, time.time()))

            def do_GET(self) -> None:
                if targets is not None and self.path.split("?", 1)[0] == "/api/v1/targets":
                    self._answer(200, targets())
                    return
                if self.path != "/dcim":
                    self._answer(404, {"status": "not found"})
                    return
                self._answer(200, dcim())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="receivers", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> None:
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


JIRA_ISSUE = "/rest/api/2/issue"
_FILED_FOR = re.compile(r"Filed by aiops for (\S+)")


def _jira_issue(
    body: Any, filed: list[dict[str, Any]], tickets: Callable[[str], None] | None
) -> tuple[int, dict[str, Any]]:
    """Jira's create-issue: `fields` with a project, a summary and an issue type; 201 `{id, key, self}`. The
    component is what the description says it was filed for (aiops/integrations/ticket.py writes it first)."""
    fields = body.get("fields") if isinstance(body, dict) else None
    if (
        not isinstance(fields, dict)
        or not fields.get("summary")
        or not isinstance(fields.get("project"), dict)
    ):
        return 400, {"errorMessages": [], "errors": {"summary": "You must specify a summary of the issue."}}
    found = _FILED_FOR.search(str(fields.get("description") or ""))
    component = found.group(1).rstrip(".") if found else ""
    key = f"{fields['project'].get('key') or 'OPS'}-{len(filed) + 1}"
    filed.append(
        {"key": key, "component": component, "summary": str(fields["summary"])[:200], "at": time.time()}
    )
    if tickets is not None and component:
        tickets(component)
    return 201, {"id": str(10000 + len(filed)), "key": key, "self": f"/rest/api/2/issue/{key}"}


# -- the person on call ---------------------------------------------------------------------------------------
@dataclass
class Case:
    """One page the on-call works on: where it came from, and the steps approved for it."""

    alert: Alert
    tier: str  # the service that paged: a node agent's name or `fleet`
    incident_id: str
    due_ts_s: float
    steps: list[list[str]] = field(default_factory=list)  # proposal ids approved, step by step
    step_done_ts_s: float | None = None
    finished: bool = False


@dataclass(frozen=True)
class Step:
    step_id: str | None  # a plan's step, None for a pile's group of one kind
    proposal_ids: list[str]
    physical: bool  # needs a signature (physical, or digital on the fleet: a node runs it signed); else run


@dataclass
class Signature:
    ts_s: float
    tier: str
    incident_id: str
    proposal_id: str
    principal: str


class OnCall:
    def __init__(
        self,
        services: Callable[[str], Any],
        signers: dict[str, SshSigner],
        *,
        delay_s: float = 300.0,
        retry_after_s: float = 1800.0,
    ) -> None:
        self.services = services  # tier name -> its Agent (bench/oncall_cluster.py), or None
        self.signers = signers  # principal -> signer; the first is the person on call, the next the second
        self.delay_s, self.retry_after_s = delay_s, retry_after_s
        self.cases: list[Case] = []
        self.seen = 0
        self.signatures: list[Signature] = []
        self.refusals: list[tuple[float, str, str]] = []  # (ts, proposal, why) approvals the product refused

    def tick(self, pagerduty: PagerDuty, now_ts_s: float) -> None:
        with pagerduty.lock:
            fresh = pagerduty.alerts[self.seen :]
            self.seen = len(pagerduty.alerts)
        for alert in fresh:
            details = alert.details
            tier = str(details.get("node") or alert.source)
            incident_id = str(details.get("incident_id") or "")
            self.cases.append(Case(alert, tier, incident_id, alert.opened_ts_s + self.delay_s))
        for case in self.cases:
            if not case.finished and now_ts_s >= case.due_ts_s:
                self._work(case, now_ts_s)

    def _work(self, case: Case, now_ts_s: float) -> None:
        agent = self.services(case.tier)
        if agent is None or agent.down:
            case.finished = True
            return
        with agent.service.owner.store() as store:
            if case.steps and not self._failed(store, case, now_ts_s):
                if self._resolved(store, case.incident_id):
                    case.finished = True
                case.due_ts_s = now_ts_s + LOOK_AGAIN_S
                return
            taken = 0
            signed_plans: set[str] = (
                set()
            )  # one step to sign per plan a visit (an incident may hold two faults')
            for _ in range(MAX_STEPS_A_VISIT):  # steps that need nobody first, then one to sign per plan
                step = self._next_step(agent, store, case)
                if step is None:
                    break
                plan_id = step.step_id.rsplit(".", 1)[0] if step.step_id else ""
                if step.physical and signed_plans and (not plan_id or plan_id in signed_plans):
                    break
                service = agent.service  # the world as the tier's service attaches it (its ticket sink too)
                attached = attach(
                    store, twin=agent.twin, node=service.config.node.name, ticket=service.ticket
                )
                guard = desk(store, attached)
                if not step.physical:
                    done = self._digital(guard, step, now_ts_s)
                elif step.step_id is not None:
                    done = self._sign_step(agent, case, step, now_ts_s)
                else:
                    done = self._sign(guard, case, step, now_ts_s)
                case.steps.append(done or step.proposal_ids)
                case.step_done_ts_s = now_ts_s
                taken += 1
                if step.physical:
                    if not plan_id:
                        break  # a pile's group of one kind: one a visit
                    signed_plans.add(plan_id)
            if not taken:
                case.finished = not case.steps or self._resolved(store, case.incident_id)
            # after signing, the person looks again as soon as they would look at a page: did it run?
            case.due_ts_s = now_ts_s + (self.delay_s if taken else self.retry_after_s)

    def _people(self, store: Store, proposal_ids: list[str]) -> list[tuple[str, SshSigner]]:
        """The person on call, and the second person where a target needs two."""
        needed = max(
            int(store.scalar("SELECT approvals_needed FROM proposals WHERE proposal_id = ?", [pid]) or 1)
            for pid in proposal_ids
        )
        return list(self.signers.items())[: max(1, needed)]

    def _sign_step(self, agent: Any, case: Case, step: Step, now_ts_s: float) -> list[str]:
        """One signature over the whole plan step per person it needs (`aiops plans approve STEP`); the tier's
        service runs the targets, or dispatches them to their nodes, at its next flush."""
        assert step.step_id is not None
        with agent.service.owner.store() as store:
            people = self._people(store, step.proposal_ids)
        others = [p for p in self.signers.items() if p not in people]
        for principal, signer in people:
            try:
                decision = approve_step(agent.service.workspace, step.step_id, signer, execute=False)
            except (GuardrailError, AiopsError) as exc:  # the product refused: the person reads why, goes on
                self.refusals.append((now_ts_s, step.step_id, str(exc)[:200]))
                if isinstance(exc, GuardrailError) and exc.rule == "two_person" and others:
                    people.append(others.pop(0))  # "ask another approver": the second person signs instead
                    continue
                return []
            self.signatures.append(Signature(now_ts_s, case.tier, case.incident_id, step.step_id, principal))
            if decision.authorisation.ok:
                break
        return list(step.proposal_ids)

    def _sign(self, guard: Any, case: Case, step: Step, now_ts_s: float) -> list[str]:
        """An incident without a plan: one signature per proposal (and per person it needs)."""
        people = self._people(guard.store, step.proposal_ids)
        approved = []
        for proposal_id in step.proposal_ids:
            for principal, signer in people:
                try:
                    guard.approve(proposal_id, signer)
                except (GuardrailError, AiopsError) as exc:
                    self.refusals.append((now_ts_s, proposal_id, str(exc)[:200]))
                    break
                self.signatures.append(
                    Signature(now_ts_s, case.tier, case.incident_id, proposal_id, principal)
                )
                approved.append(proposal_id)
        return approved

    def _digital(self, guard: Any, step: Step, now_ts_s: float) -> list[str]:
        """A step that needs no approval (a ticket, a lane fix): run, as `aiops actions execute` runs it."""
        ran = []
        for proposal_id in step.proposal_ids:
            try:
                outcome = guard.execute(proposal_id)
            except (GuardrailError, AiopsError) as exc:
                self.refusals.append((now_ts_s, proposal_id, str(exc)[:200]))
                continue
            if outcome.status == "executed":
                ran.append(proposal_id)
            else:
                self.refusals.append((now_ts_s, proposal_id, f"{outcome.status}: {outcome.message[:180]}"))
        return ran

    def _failed(self, store: Store, case: Case, now_ts_s: float) -> bool:
        """Whether the last step failed: the product's verdict where it records one (`action_outcomes`), a
        target refused, denied or expired, else the incident still open `retry_after_s` after it."""
        last = case.steps[-1]
        marks = ", ".join("?" for _ in last)
        verdicts = [
            str(r[0])
            for r in store.conn.execute(
                f"SELECT verdict FROM action_outcomes WHERE proposal_id IN ({marks})", last
            ).fetchall()
        ]
        if verdicts:
            return "failed" in verdicts
        statuses = {
            str(r[0])
            for r in store.conn.execute(
                f"SELECT status FROM proposals WHERE proposal_id IN ({marks})", last
            ).fetchall()
        }
        if statuses & {"failed", "refused", "expired", "denied"}:
            return True
        if _nobody_runs(store, last):
            return True  # approved, and the product says no actor carries it out: the person moves on
        done = case.step_done_ts_s or now_ts_s
        return now_ts_s - done >= self.retry_after_s and not self._resolved(store, case.incident_id)

    @staticmethod
    def _resolved(store: Store, incident_id: str) -> bool:
        row = store.conn.execute(
            "SELECT resolved_ts_s FROM incidents WHERE incident_id = ?", [incident_id]
        ).fetchone()
        return row is None or row[0] is not None

    def _next_step(self, agent: Any, store: Store, case: Case) -> Step | None:
        """The step to take next: the plan's first proposed step with targets still pending (the product
        escalates to it when a step fails); when there is none after a failed step, the plan's next waiting step,
        asked for as `aiops plans propose STEP` does. An incident without a plan: its pending proposals of one
        kind, in the order they were filed."""
        done = {pid for step in case.steps for pid in step}
        found = [p for p in plans(store, incident_id=case.incident_id) if p.status == "open"]
        if found or plans(store, incident_id=case.incident_id):
            for plan in found:
                for s in plan.steps:
                    pending = [p for p in s.proposal_ids if p not in done and _status(store, p) == "pending"]
                    if s.status == "proposed" and pending:
                        return Step(s.step_id, pending, _signed(store, s.step_id))
            waiting = [s for plan in found for s in plan.steps if s.status == "waiting"]
            if not case.steps or not waiting:
                return None
            try:
                filed = propose_step(agent.service.workspace, waiting[0].step_id, "alice")
            except (GuardrailError, AiopsError) as exc:
                self.refusals.append((time.time(), waiting[0].step_id, str(exc)[:200]))
                return None
            pending = [p for p in filed if _status(store, p) == "pending"]
            return Step(waiting[0].step_id, pending, _signed(store, waiting[0].step_id)) if pending else None
        rows = store.conn.execute(
            "SELECT proposal_id, kind, physical FROM proposals WHERE incident_id = ? AND status = 'pending' "
            "ORDER BY created_ts_s, proposal_id",
            [case.incident_id],
        ).fetchall()
        left = [(str(pid), str(kind), bool(physical)) for pid, kind, physical in rows if pid not in done]
        if not left:
            return None
        kind, physical = left[0][1], left[0][2]
        return Step(None, [pid for pid, k, _ in left if k == kind], physical)


def _signed(store: Store, step_id: str) -> bool:
    """Whether the step is one to sign on this tier (`aiops plans approve` takes it: a physical step, or on the
    fleet a digital one, which a node runs only signed); else it needs nobody and is run."""
    try:
        return bool(step_targets(store, step_id))
    except GuardrailError:
        return False


# What the fleet says of an approved step nobody can carry out (aiops/fleet/scopes.py `route_of`): it stays
# approved, and a person reading it goes on to the plan's next step instead of waiting for it.
NOBODY_RUNS = (
    "no actor carries out",
    "holds no node agent",
    "has no node agent left",
    "is not in the fleet's topology",
    "runs through the cluster's scheduler",
)


def _nobody_runs(store: Store, proposal_ids: list[str]) -> bool:
    marks = ", ".join("?" for _ in proposal_ids)
    rows = store.conn.execute(
        f"SELECT message FROM proposals WHERE status = 'approved' AND proposal_id IN ({marks})", proposal_ids
    ).fetchall()
    return any(any(words in str(r[0] or "") for words in NOBODY_RUNS) for r in rows)


def _status(store: Store, proposal_id: str) -> str:
    return str(store.scalar("SELECT status FROM proposals WHERE proposal_id = ?", [proposal_id]) or "")


def announce_maintenance(store: Store, epoch_ts_s: float, event: Event) -> None:
    """A churn's maintenance, announced as an operator announces planned work (`aiops maintenance add`, by
    alice): from 5 minutes before the drain to 10 minutes after the resume."""
    open_window(
        store,
        kind="maintenance",
        scope="node",
        target=event.component,
        duration_s=event.end_s - event.start_s + 900.0,
        reason=f"planned maintenance of {event.component}: drain, reboot, resume",
        by="alice",
        starts_ts_s=epoch_ts_s + event.start_s - 300.0,
    )
