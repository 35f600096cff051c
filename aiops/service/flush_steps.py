"""The flush's steps, by name: each runs inside `Service.flush` with the workspace open (the store is the one
transaction's connection) unless its row says otherwise, and is guarded there (`Service._guarded`: a step that
fails is logged under its name and counted in `aiops_loop_errors_total`; the data is stored and the loop goes
on). In the flush's order:

| step (the log's word) | function | workspace | when |
| --- | --- | --- | --- |
| scheduler view | `read_views`: the scheduler's view of drained or cordoned nodes the breaker counts (`[scheduler]`'s for this node's desks, `[fleet.scheduler]`'s for the fleet's dispatcher; `sinfo`, the Kubernetes node list), at most every 10 s (`HeldView`) | **closed**: before the flush takes it | each flush |
| jobs | `refresh_jobs` | open | the workload collector collected (written when its rows changed: unchanged.py) |
| detection | `detect_and_respond` (and `execute_approved`, Slack's `run_requested`): a proposal whose backend calls another system is validated and claimed here, not run (`execute_or_claim`) | open | each flush with telemetry |
| paging | `review_pages` | open | a window was judged, or `review_every_s` passed, or the flush before judged a dispatch (what it set is exported at once) |
| closed loop | `judge_closed_loop` | open | as paging |
| plans | `advance_plans` | open | each flush with telemetry (attaches the world only with an open plan) |
| alerts | `investigate_alerts` | open | each flush with telemetry |
| conditions | `conditions` | open | each flush |
| dispatch | `DispatchInbox.judge` (dispatch_in.py): one whose backend calls another system (this node's scheduler) is judged and claimed here, run and answered by `act_outside` | open | a fleet's dispatch waits (one arriving wakes the loop for a flush at once: `Service._nap`) |
| dispatcher | `dispatch_ready`: the fleet's dispatcher (aiops/fleet/dispatch.py) reads what is due, makes each POST ready and claims each scheduler step (`Guardrails.begin`) | open | on the fleet |
| retention | `retention` | open | hourly |
| report | `report` | open | a scheduled report is due |
| (export) | `export_store` | open | as paging, and at the first flush: unguarded |
| actions outside | `act_outside`: the executions claimed above run (a ticket sink's POST; a node's scheduler: scontrol, the Kubernetes API, for an approved proposal or a fleet's dispatch; a GPU reset, which asks the scheduler first), then their executions and read-backs written in a second, short hold (`Guardrails.finish`), a dispatch answered from there | **closed** while calling | the flush claimed one |
| dispatcher sends | `dispatch_outside`: the POSTs to node agents and the `[fleet.scheduler]` steps (scontrol, the Kubernetes API), then the answers, executions and read-backs written in a second, short hold (`Guardrails.finish`) | **closed** while sending | on the fleet, when a send or step is ready |

No step waits on another system while the workspace is open: a node agent slow to answer the
fleet (up to `[fleet] dispatch_timeout_s` per send), a scheduler slow to run a step or to list its nodes (up to
`[scheduler]`/`[fleet.scheduler]` `timeout_s` per call) or a ticket sink slow to file (`[notify.ticket]
timeout_s`) keeps neither the console, the API nor leases waiting. An execution is claimed in the ledger in the
first hold, so it runs at most once even if the service dies before the second; the desks inside the flush read
the schedulers' views as last read before it. tests/test_dispatch_fleet.py (the POST) and
tests/test_flush_outside.py (the fleet's scheduler step and view; a node's view, its scheduler's action and a
fleet's dispatch run on it; a ticket) find the workspace closed at each call. What stays inside, and why: the
twin's actuator (it writes the twin's log into the workspace in the same hold: no other system), NVML and sysfs
(this host's driver and files, no network), and the record-only kinds (ack_alert; open_ticket without a sink).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiops.runtime.world import TICKETS_ONLY, Attached, desk
from aiops.service.closed_loop import close_loop
from aiops.service.conditions import ConditionReport
from aiops.store import Store
from aiops.store.workloads import current_ranks, write_ranks
from guardrails.executor import Claimed, ExecutionOutcome
from guardrails.proposal_desk import Guardrails
from guardrails.routing import acts_remotely
from guardrails.runbook_runs import run_covered

if TYPE_CHECKING:
    from aiops.service.service import Service


class Dispatcher(Protocol):
    """The fleet's dispatcher (aiops/fleet/dispatch.py) as the flush drives it: the scheduler's view read before
    the workspace is opened, what to send read with it open, sent with it closed, and the answers written with
    it open again."""

    def read_views(self) -> None: ...

    def collect(self, store: Store) -> list[str]: ...

    def send(self) -> int: ...

    def record(self, store: Store) -> list[str]: ...


log = logging.getLogger("aiops.service")
RETENTION_EVERY_S = 3600.0


def refresh_jobs(svc: Service, store: Store) -> None:
    """This node's job_ranks and jobs from the newest collect of who runs on its GPUs, and the export labels
    that follow them (aiops/store/workloads.py); the same rows as this process wrote last, with nothing written
    since, are not written again."""
    assert svc.workloads_ts_s is not None and svc.workloads_node is not None
    rows = current_ranks(store, svc.workloads_node, svc.workloads_ts_s)
    svc.workloads_ts_s = None
    if svc.unchanged.same_ranks(rows):
        return  # the rows this process wrote last, nothing since: not written again (unchanged.py)
    write_ranks(store, svc.workloads_node, rows)
    svc.unchanged.wrote_ranks(rows)
    svc.metrics.inventory(
        store.query("SELECT component, kind, rack, node, idx, uuid, device FROM topology"),
        store.query("SELECT job, rank, gpu, node, nic FROM job_ranks"),
    )


def detect_and_respond(svc: Service, store: Store) -> None:
    assert svc.sources is not None and svc.newest_ts_s is not None
    transitions = svc.live.advance(store, svc.newest_ts_s, svc.first_ts_s)
    held: list[Any] = []

    def attached() -> Any:  # the world, attached only when something is filed or executed
        if not held:
            held.append(svc.attach(store))
        return held[0]

    svc.responder.handle(store, transitions, lambda: desk(store, attached()))
    if store.scalar("SELECT count(*) FROM proposals WHERE status = 'approved'"):
        execute_approved(svc, store, attached())
    if store.guardrails.runbook:
        run_by_runbook(svc, store, attached)
    svc.breaker.observe(store, lambda: desk(store, attached()), time.time())  # every 15 s: attaches then
    if svc.slack is not None:
        svc.slack.run_requested(
            store, attached(), lambda guard, pid: execute_or_claim(svc, guard, attached(), pid)
        )


def conditions(svc: Service, store: Store) -> None:
    """What the source and the watched collectors say of their sight, as condition incidents."""
    assert svc.sources is not None
    report = svc.sources.conditions() if svc.sources.conditions else ConditionReport()
    now_ts_s = svc.sources.clock()
    report.add(svc.watch.report(now_ts_s))
    svc.conditions.apply(store, report, now_ts_s)


def review_pages(svc: Service, store: Store) -> None:
    """Holds that ran out, windows that ended, node incidents the fleet covers: paged or exported."""
    svc.page_states = svc.pager.review(store, svc.newest_ts_s)  # exported with the incidents


def judge_closed_loop(svc: Service, store: Store) -> None:
    """Supersede what a node ran, judge what ran, export what this workspace set (closed_loop.py)."""
    assert svc.newest_ts_s is not None
    done = close_loop(store, svc.newest_ts_s, svc.metrics.set_intended, memory=svc.loop_memory)
    if done["superseded"] or done["outcomes"]:
        log.info("closed loop", extra=done)


def advance_plans(svc: Service, store: Store) -> None:
    """The open plans' step statuses from their proposals and the outcomes just judged; after a failed step
    the next one is proposed (aiops/plans/lifecycle.py)."""
    assert svc.sources is not None
    if not store.scalar("SELECT count(*) FROM plans WHERE status = 'open'"):
        return  # nothing to follow: the world is not attached on every flush (docs/BENCHMARKS.md, "Footprint")
    from aiops.plans import advance  # the plans' lifecycle: loaded once a plan is open

    attached = svc.attach(store)
    changed = advance(desk(store, attached))
    if changed:
        log.info("plans", extra={"changed": changed[:20]})


def investigate_alerts(svc: Service, store: Store) -> None:
    assert svc.newest_ts_s is not None
    done = svc.alerts.run(store, svc.newest_ts_s, svc.to_store_ts_s)
    if done:
        log.info(
            "alerts",
            extra={
                "handled": len(done),
                "investigated": svc.alerts.investigated,
                "resolved": svc.alerts.resolved,
                "shed": svc.alerts.shed,
                "waiting": len(svc.alerts.waiting),
            },
        )


def execute_approved(svc: Service, store: Store, attached: Any) -> None:
    """Proposals people approved (with `aiops actions approve`, in the chat) run here, where the world is;
    one whose backend calls another system is claimed here and run by `act_outside`."""
    if attached.actuator is None:
        return
    guard = desk(store, attached)
    for record in guard.records.proposals("approved"):
        if attached.kind == TICKETS_ONLY and record.action.kind != "open_ticket":
            continue  # the fleet files tickets itself; every other action is dispatched to where it acts
        outcome = execute_or_claim(svc, guard, attached, record.proposal_id)
        if outcome is not None:
            said(outcome)


def run_by_runbook(svc: Service, store: Store, attached: Callable[[], Any]) -> None:
    """Plan steps waiting for people that the signed standing runbook covers run now (`[guardrails] runbook`,
    guardrails/runbook_runs.py); the others say why they wait. The fleet runs none itself (nothing is
    dispatched under a runbook: not built yet, docs/GUARDRAILS.md)."""
    if not store.scalar("SELECT count(*) FROM proposals WHERE status = 'pending' AND step_id IS NOT NULL"):
        return
    world = attached()
    if world.actuator is None or world.kind == TICKETS_ONLY:
        return
    guard = desk(store, world)
    for run in run_covered(guard, lambda pid: execute_or_claim(svc, guard, world, pid)):
        if run.outcome is not None:
            said(run.outcome)


def execute_or_claim(
    svc: Service, guard: Guardrails, attached: Any, proposal_id: str
) -> ExecutionOutcome | None:
    """The proposal executed now, or, when its backend calls another system (a scheduler, a ticket sink:
    guardrails.routing.acts_remotely), validated and claimed now and left in `svc.claimed` for `act_outside`
    (None then)."""
    record = guard.records.proposal(proposal_id)
    if record is None or not acts_remotely(attached.actuator, record.action):
        return guard.execute(proposal_id)
    begun = guard.begin(proposal_id)
    if isinstance(begun, ExecutionOutcome):
        return begun
    svc.claimed.append(Later(begun, attached, lambda _guard, outcome: said(outcome)))
    return None


@dataclass
class Later:
    """An execution the flush claimed, to run with the workspace closed (`act_outside`): `then` hears its
    outcome on the desk of the second hold; `failed` hears why there is none."""

    claimed: Claimed
    attached: Attached
    then: Callable[[Guardrails, ExecutionOutcome], None]
    failed: Callable[[BaseException], None] = lambda _exc: None


def act_outside(svc: Service) -> None:
    """The executions the flush claimed, run with the workspace closed (the console, the API and leases are
    served meanwhile), then their executions and read-backs written in one more short hold. A claim stands
    whatever happens here: an execution runs at most once."""
    taken, svc.claimed = svc.claimed, []
    for later in taken:
        later.claimed.act()
    with svc.owner.store() as store:
        for later in taken:
            try:
                guard = desk(store, later.attached)
                later.then(guard, guard.finish(later.claimed))
            except Exception as exc:  # one write that fails leaves the others to be written
                log.exception("not written", extra={"proposal_id": later.claimed.action.proposal_id})
                later.failed(exc)


def said(outcome: ExecutionOutcome) -> None:
    log.info(
        "executed",
        extra={"proposal_id": outcome.proposal_id, "status": outcome.status, "why": outcome.message[:200]},
    )


def read_views(svc: Service) -> None:
    """The schedulers' views the breaker counts (`[scheduler]`'s for this node's desks, `[fleet.scheduler]`'s
    for the fleet's dispatcher), read before the flush holds the workspace: the desks inside read the copy."""
    if svc.scheduler_view is not None:
        svc.scheduler_view.refresh()
    if svc.dispatcher is not None:
        svc.dispatcher.read_views()


def dispatch_ready(svc: Service, store: Store) -> None:
    """What the fleet sends its node agents, read from the workspace and made ready (nothing sent here)."""
    assert svc.dispatcher is not None
    svc.dispatcher.collect(store)


def dispatch_outside(svc: Service) -> None:
    """The POSTs `dispatch_ready` made ready, sent with the workspace closed (the console, the API and leases
    are served meanwhile), then the nodes' answers written in one more short hold of the workspace."""
    assert svc.dispatcher is not None
    if svc.dispatcher.send():
        with svc.owner.store() as store:
            settled = svc.dispatcher.record(store)
        if settled:
            log.info("dispatch settled", extra={"proposals": settled[:20]})


def report(svc: Service, store: Store) -> None:
    """A scheduled report when one is due (or was missed while the service was down), of the period up to
    the telemetry's clock (the twin's, in a simulation)."""
    assert svc.sources is not None
    svc.reports.maybe_run(store, svc.sources.clock())


def retention(svc: Service, store: Store) -> None:
    if svc.clock() - svc.last_retention < RETENTION_EVERY_S:
        return
    svc.last_retention = svc.clock()
    now = svc.sources.clock() if svc.sources else time.time()
    deleted = store.apply_retention(svc.config.store.retention_days * 86_400.0, now)
    svc.loop_memory.forget()  # what the closed loop read may be gone
    log.info("retention", extra={"deleted": sum(deleted.values())})


def export_store(svc: Service, store: Store) -> None:
    open_rows = store.query(
        "SELECT i.incident_id, i.severity, h.root_cause, coalesce(h.component, i.components[1]) AS component, "
        "i.opened_ts_s, h.confidence, i.symptoms "
        "FROM incidents i LEFT JOIN hypotheses h "
        "ON h.incident_id = i.incident_id AND h.rank = 1 WHERE i.resolved_ts_s IS NULL ORDER BY i.incident_id"
    )
    svc.metrics.set_incidents(open_rows, svc.page_states)
    if svc.sources is not None and svc.sources.export is not None:
        svc.sources.export(svc.metrics)
    path = Path(svc.config.store.path)
    size = sum(p.stat().st_size for p in (path, Path(str(path) + ".wal")) if p.exists())
    svc.metrics.gauge("store_size_bytes", "size of the workspace's DuckDB file and WAL", size)
    svc.metrics.gauge("detection_windows", "windows live detection has judged since start", svc.live.windows)
    svc.metrics.gauge("leases", "times the service lent its file to another process", svc.owner.leases)
    if svc.alert_token:
        svc.metrics.total(
            "alerts_received_total", "alerts Alertmanager's webhook brought", svc.alert_inbox.accepted
        )
        svc.metrics.total("alert_investigations_total", "firing alerts investigated", svc.alerts.investigated)
        svc.metrics.total(
            "alerts_shed_total",
            "firing alerts dropped uninvestigated: the queue was full",
            svc.alerts.shed,
        )
        svc.metrics.gauge("alerts_waiting", "alerts queued for investigation", len(svc.alerts.waiting))
    if svc.profiles.enabled:
        svc.metrics.total("profiles_total", "profiling runs the incident trigger stored", svc.profiles.runs)
    if svc.outbox.enabled:
        svc.metrics.total(
            "notifications_queued_total", "notifications queued (each webhook counts)", svc.outbox.queued
        )
        svc.metrics.total(
            "notifications_delivered_total", "notifications a webhook accepted", svc.outbox.delivered
        )
