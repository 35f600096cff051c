"""`aiops run`: one long-running service per node (and per workspace).

The loop, each tick: step the twin (sim), collect from every source that is due (timed; a collector's failure
is a `collector_errors` row, never the loop's), buffer the rows; every `flush_interval_s`: ingest the batch in
one transaction on the file the service holds open, record the twin's steps, run live detection over the new
complete windows, diagnose and file what changed, execute proposals people approved (on the world the
workspace acts on), judge what ran once its window passed and export what it set (closed_loop.py), queue
notifications, investigate the alerts Alertmanager's webhook brought
(alert_investigate.py), write the scheduled report when due ([report]), start a profiling run of this host's
CUDA processes in a background thread when a diagnosis asks for one ([profile], profile_trigger.py); hourly: retention. Around it: the service lock and leases
(aiops/service/owner.py), the one HTTP listener (metrics, health, API, the Alertmanager webhook, and the console
at `/` when one is given: web.py, server.py), notification delivery in its own thread.
SIGTERM/SIGINT end the loop after a last flush (exit 0); kill -9 loses at most the batch not yet flushed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client.registry import CollectorRegistry
from starlette.types import ASGIApp

from aiops.config import Config, node_of
from aiops.datapath.policy import Policy
from aiops.detect.incidents import incident_prefix
from aiops.integrations.ticket import TicketActuator
from aiops.models import Hypothesis, Incident
from aiops.plans import advance
from aiops.runtime.world import TICKETS_ONLY, attach, desk
from aiops.scenarios import Scenario
from aiops.service.alert_investigate import AlertInvestigator
from aiops.service.alerts_in import AlertInbox
from aiops.service.api import AlertRoute, Api
from aiops.service.breaker_metrics import BreakerMetrics
from aiops.service.closed_loop import close_loop
from aiops.service.conditions import CollectorWatch, ConditionBook, ConditionReport
from aiops.service.dispatch_in import DispatchInbox
from aiops.service.live import LiveDetection
from aiops.service.metrics import MetricsCache
from aiops.service.outbox import Outbox
from aiops.service.owner import FileOwner, OwnedWorkspace
from aiops.service.pager import Pager, PageState
from aiops.service.profile_trigger import ProfileTrigger
from aiops.service.reports import ReportSchedule, check_paths
from aiops.service.respond import Notify, Responder
from aiops.service.server import WebServer
from aiops.service.slack_actions import SlackChat
from aiops.service.sources import (
    Sources,
    check_node,
    config_resolvers,
    host_sources,
    register_topology,
)
from aiops.service.web import ServiceRoutes, service_app
from aiops.store import Store
from aiops.store.maintenance import active_windows, matching, membership
from aiops.store.workloads import refresh_jobs
from collectors.base import RowBatch, RowBuffer
from guardrails import witness

log = logging.getLogger("aiops.service")
RETENTION_EVERY_S = 3600.0


def held_by_maintenance(store: Store, incident: Incident) -> str | None:
    """The maintenance window (not a silence) holding every part of `incident` now, by id; None when none."""
    window = matching(
        active_windows(store, time.time()), incident.components, {}, membership(store), actions=True
    )
    return window.window_id if window is not None else None


class Companion(Protocol):
    """Something served beside the loop on the service's listener (the web console): its `app` answers at `/`
    every path the service's own routes do not; `start` is told the address once the listener listens, `close`
    comes before the store closes."""

    @property
    def app(self) -> ASGIApp: ...

    def start(self, host: str, port: int) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class SimSetup:
    scenario: Scenario
    lanes_policy: Policy | None = None
    speed: float = 1.0
    node: str | None = None  # one node agent of the twin's cluster (sources.py); None: the whole cluster
    epoch_ts_s: float | None = None  # the wall time of the twin's simulated second 0 (default: the start)


def store_threads(config: Config) -> int:
    """DuckDB's workers in the service: `[store] threads`, else one on a node agent (its queries cover seconds of
    one node; DuckDB's default, one per core, cost 38 MB more at 64: docs/BENCHMARKS.md) and DuckDB's default
    (0) on the fleet, whose cycles pivot thousands of GPUs."""
    return config.store.threads or (0 if config.node.name == "fleet" else 1)


class Service:
    def __init__(
        self,
        config: Config,
        *,
        sim: SimSetup | None = None,
        notify: Notify | None = None,
        token: str = "",
        alert_token: str = "",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        sources: Callable[[Store], Sources] | None = None,
        dispatcher: Callable[[Store], None] | None = None,
    ) -> None:
        if sim is not None and sim.node is not None:  # the twin's node agent is that node, in its rack
            identity = {"name": sim.node, "rack": check_node(sim.scenario, sim.node)}
            config = config.model_copy(
                update={"node": config.node.model_copy(update=identity)}
            )  # no validation
        elif not config.node.name:  # no name configured: the twin's node0 (as before), else this host's own
            name = "node0" if sim is not None else node_of(config, socket.gethostname()).name
            config = config.model_copy(update={"node": config.node.model_copy(update={"name": name})})
        self.config = config
        self.sim = sim
        self.make_sources = sources  # another source than this host or the twin (`aiops fleet`: Prometheus)
        self.clock, self.sleep = clock, sleep
        self.owner = FileOwner(
            config.store.path,
            memory_limit_mb=config.store.memory_limit_mb,
            threads=store_threads(config),
            allocator_flush_mb=config.store.allocator_flush_mb,
            guardrails=config.guardrails,
            scheduler=config.scheduler,
        )
        self.workspace = OwnedWorkspace(self.owner)
        # [chatops.slack]: incident messages with buttons, and POST /api/slack/actions (slack_actions.py)
        self.slack = SlackChat(config, self.workspace) if config.chatops.slack.enabled else None
        self.metrics = MetricsCache(config.node.name)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.metrics)
        self.live = LiveDetection(
            window_s=config.detection.window_s,
            quiet_s=config.detection.quiet_s,
            replay_s=config.detection.replay_s,
            # INC-<host>-0042, INC-fleet-0007, INC-fleet-<shard>-0007 on a shard: cluster-unique
            id_prefix=incident_prefix(
                config.node.name, config.fleet.shard if config.node.name == "fleet" else ""
            ),
            severity=config.notify.severity,  # from impact ([notify.severity])
        )
        # [notify.ticket]: open_ticket files in Jira or ServiceNow (its token file read now); else a note
        self.ticket = TicketActuator.configured(config.notify.ticket)
        self.outbox = Outbox(config.notify, config.node.name, console_url=config.console_url)
        self.profiles = ProfileTrigger(
            config.profile, config.store.path, config.node.name, self.workspace, sim=sim is not None
        )
        people = notify if notify is not None else self.outbox.notify

        def deliver(store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> None:
            people(store, kind, incident, top)
            if self.slack is not None:
                self.slack.on_event(store, kind, incident, top)

        # one page per problem: the sinks hear of an incident only once it pages (pager.py, paging.py)
        self.page_states: list[PageState] = []  # the pager's last review, exported with the open incidents
        self.pager = Pager(
            config.node.name,
            deliver,
            hold_undiagnosed_s=config.notify.undiagnosed_hold_s,
            open_s=3.0 * config.detection.window_s,
        )

        def on_event(store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> None:
            self.pager.on_event(store, kind, incident, top)
            self.profiles.on_event(kind, incident, top)  # starts a thread at most: the flush goes on

        self.responder = Responder(
            notify=on_event, held=held_by_maintenance, recurrence_s=config.detection.recurrence_s
        )
        self.breaker = BreakerMetrics(self.metrics)  # the circuit breaker on /metrics (breaker_metrics.py)
        # conditions of its own sight (a blind source, a lost node agent, a blind collector): service/conditions.py
        self.conditions = ConditionBook(self.live.allocate_id, on_event)
        self.watch = CollectorWatch(config.node.name)
        self.reports = ReportSchedule(
            config.report,
            config.store.path,
            lambda: list(self.outbox.notifier.sinks.values()),
            config.node.name,
        )
        self.buffer = RowBuffer()
        self.token = token
        self.alert_token = alert_token  # [alertmanager_in]: empty, the route is off
        self.alert_inbox = AlertInbox()
        self.dispatches = DispatchInbox()  # POST /api/dispatch: judged and run in the flush (dispatch_in.py)
        self.dispatcher = dispatcher  # `aiops fleet`: sends approved proposals to their nodes (aiops/fleet)
        self.alerts = AlertInvestigator(
            self.alert_inbox,
            self.outbox.enqueue_event,
            config.node.name,
            hosts={host: identity.name for host, identity in config.node.hosts.items()},
            link_base=lambda: self.outbox.link_base,
            max_per_run=config.alertmanager_in.max_investigations,
            budget_s=config.alertmanager_in.budget_s,
            max_waiting=config.alertmanager_in.max_waiting,
        )
        self.wall_started_ts_s = time.time()
        self.source_started_ts_s = self.wall_started_ts_s
        self.http: WebServer | None = None
        self.sources: Sources | None = None
        self.stopping = threading.Event()
        self.ready = False
        self.last_tick = 0.0
        self.last_flush = 0.0
        self.last_retention = 0.0
        self.last_review = float("-inf")  # pages, the closed loop and the store's gauges were reviewed
        # at most this long apart when no window is judged (each judged window reviews them at once)
        self.review_every_s = config.detection.window_s
        self.newest_ts_s: float | None = None
        self.first_ts_s: float | None = None
        self.oldest_unflushed_ts_s: float | None = None
        self.flushes = 0
        self.companion: Companion | None = None  # set before start()
        self.said_unavailable: set[tuple[str, str]] = set()  # (collector, why) logged (_say_unavailable)
        self.workloads_ts_s: float | None = None  # the workload collector's last collect, until refresh_jobs
        self.workloads_node: str | None = None

    # -- life -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        check_paths(self.owner.db_path, self.config)  # one line, exit 2, before anything is started
        self.owner.start()
        with self.owner.store() as store:
            witness.store_path(store)  # one witness per store: another config's is refused at start
            if self.make_sources is not None:
                self.sources = self.make_sources(store)
            elif self.sim is not None:
                from aiops.service.sim_sources import sim_sources  # the twin: loaded in sim mode only

                self.sources = sim_sources(
                    store,
                    self.sim.scenario,
                    self.sim.lanes_policy,
                    self.sim.speed,
                    self.config.collectors.sysfs.interval_s,
                    node=self.sim.node,
                    epoch_ts_s=self.sim.epoch_ts_s,
                    resolvers=(
                        config_resolvers(self.config, self.sim.node)
                        if self.sim.node and self.config.collectors.workloads.enabled
                        else None
                    ),
                    workloads_interval_s=self.config.collectors.workloads.interval_s,
                )
            else:
                self.sources = host_sources(self.config)
                register_topology(store, self.sources)
            self.live.start(store)
            self.conditions.start(store)
            self.reports.start(store)
            if self.make_sources is None:  # a node agent's inventory: the fleet re-exporting every node's
                # would be read back (a Prometheus scrapes it too) as a second instance declaring each node
                self.metrics.inventory(  # node -> rack, GPU index and UUID, the jobs' ranks: export labels
                    store.query("SELECT component, kind, rack, node, idx, uuid, device FROM topology"),
                    store.query("SELECT job, rank, gpu, node, nic FROM job_ranks"),
                )
        self.profiles.start()
        self.wall_started_ts_s, self.source_started_ts_s = time.time(), self.sources.clock()
        if self.config.http.listen:
            route = AlertRoute(self.alert_token, self.alert_inbox) if self.alert_token else None
            chat = self.slack.routes() if self.slack is not None else []
            routes = ServiceRoutes(
                self.registry,
                Api(self.workspace),
                self._healthy,
                self._ready,
                self.token,
                self.metrics.dcgm_text,
                route,
                facility=self.metrics.facility_text,
                dcim=self.metrics.dcim_document,
                dispatches=self.dispatches,
            )
            root = self.companion.app if self.companion is not None else None
            self.http = WebServer(
                service_app([*chat, *routes.routes()], root),
                self.config.http.listen,
                allowed_hosts=tuple(self.config.http.allowed_hosts),
                trusted_proxies=tuple(self.config.http.trusted_proxies),
            )
            self.http.start()
            self.outbox.link_base = f"http://{self.http.address}"
            if self.slack is not None:
                self.slack.link_base = self.outbox.link_base
        self.outbox.start(self.workspace)
        if self.slack is not None:
            self.slack.start()
        if self.companion is not None and self.http is not None:
            self.companion.start(self.http.host, self.http.port)
        self.last_tick = self.last_flush = self.last_retention = self.clock()
        log.info(
            "started",
            extra={
                "db": self.config.store.path,
                "pid": os.getpid(),
                "sources": self.sources.describe if self.sources else "",
                "listen": self.http.address if self.http else "",
            },
        )

    def stop(self) -> None:
        self.stopping.set()

    def run(self, duration_s: float | None = None) -> int:
        """Until `stop()` (a signal) or `duration_s` of wall time; always ends with a flush and closes."""
        self.start()
        started = self.clock()
        try:
            while not self.stopping.is_set():
                if duration_s is not None and self.clock() - started >= duration_s:
                    break
                self.tick()
        finally:
            self.flush()
            self.profiles.close()  # a run in progress stops early and is stored before the file closes
            self.outbox.stop()
            if self.slack is not None:
                self.slack.stop()
            if self.http is not None:
                self.http.close()  # the listener first: no request reaches what closes next
            if self.companion is not None:
                self.companion.close()
            if self.sources is not None:
                self.sources.close()
            self.owner.close()
            log.info("stopped", extra={"flushes": self.flushes, "windows": self.live.windows})
        return 0

    # -- the loop ---------------------------------------------------------------------------------------------
    def tick(self) -> None:
        assert self.sources is not None
        begun = self.clock()
        self.sources.tick()
        for source in self.sources.due():
            self._collect(source.name, source.collector, source.interval_s)
        self.last_tick = self.clock()
        if self.last_tick - self.last_flush >= self.config.store.flush_interval_s:
            self.flush()
        self.sleep(self.sources.wait_s(self.clock() - begun))

    def _collect(self, name: str, collector: Any, interval_s: float = 0.0) -> None:
        assert self.sources is not None
        now_ts_s = self.sources.clock()
        started = time.perf_counter()
        tables: dict[str, Any] = {}
        failure = ""
        try:
            if hasattr(collector, "rows"):
                batches: dict[str, RowBatch] = collector.rows(now_ts_s)
            else:  # Arrow tables (the fleet's Prometheus reader): stored, not re-exported at /metrics
                tables, batches = collector.collect(now_ts_s), {}
                errors = tables.pop("collector_errors", None)  # counted and logged as a row collector's are
                if errors is not None:
                    rows = [tuple(r.values()) for r in errors.to_pylist()]
                    batches = {"collector_errors": RowBatch(tuple(errors.column_names), rows)}
        except Exception as exc:  # a collector never takes the loop down: its failure is data
            failure = f"{type(exc).__name__}: {exc}"
            batches = {
                "collector_errors": RowBatch(
                    ("ts_s", "collector", "component", "error", "detail"),
                    [(now_ts_s, name, None, type(exc).__name__, str(exc)[:500])],
                )
            }
        produced = any(batch.rows for table, batch in batches.items() if table != "collector_errors")
        self.watch.saw(name, collector, now_ts_s, interval_s, failure, produced or bool(tables))
        self.metrics.timing(name, time.perf_counter() - started)
        if (
            getattr(collector, "name", None) == "workloads" and "gpu_processes" in batches
        ):  # a collect, even empty
            self.workloads_ts_s, self.workloads_node = now_ts_s, getattr(collector, "node", None)
        self._say_unavailable(name, batches.get("collector_errors"))
        self.buffer.add(batches)
        self.buffer.add_tables(tables)
        for table, batch in batches.items():
            self.metrics.observe(table, batch.columns, batch.rows)
        read_from_ts_s = now_ts_s  # a reader's data starts at its clock before the read, ends at it after
        if not hasattr(collector, "rows"):
            if not tables and not batches:
                return  # nothing read yet: the data clock has not moved
            now_ts_s = max(now_ts_s, self.sources.clock())
        self.newest_ts_s = now_ts_s
        if self.first_ts_s is None:
            self.first_ts_s = read_from_ts_s  # detection starts there (a fleet's look-back included)
        if self.oldest_unflushed_ts_s is None:
            self.oldest_unflushed_ts_s = read_from_ts_s

    def _refresh_jobs(self, store: Store) -> None:
        """This node's job_ranks and jobs from the newest collect of who runs on its GPUs, and the export labels
        that follow them (aiops/store/workloads.py)."""
        assert self.workloads_ts_s is not None and self.workloads_node is not None
        refresh_jobs(store, self.workloads_node, self.workloads_ts_s)
        self.workloads_ts_s = None
        self.metrics.inventory(
            store.query("SELECT component, kind, rack, node, idx, uuid, device FROM topology"),
            store.query("SELECT job, rank, gpu, node, nic FROM job_ranks"),
        )

    def _say_unavailable(self, name: str, batch: RowBatch | None) -> None:
        """A collector that finds nothing to read (no GPU driver, no InfiniBand) writes its `unavailable` row once
        at its first collect; the log says it once too, so `journalctl -u aiops` shows what this node lacks."""
        if batch is None or "error" not in batch.columns or "detail" not in batch.columns:
            return
        error_at, detail_at = batch.columns.index("error"), batch.columns.index("detail")
        who_at = batch.columns.index("collector") if "collector" in batch.columns else None
        for row in batch.rows:
            said = (name if who_at is None else str(row[who_at]), str(row[detail_at]))
            if row[error_at] == "unavailable" and said not in self.said_unavailable:
                self.said_unavailable.add(said)
                log.warning("collector unavailable", extra={"collector": said[0], "detail": said[1]})

    def flush(self) -> None:
        """Ingest what was collected, then detect, diagnose, file, execute, notify: one transaction's worth."""
        if self.sources is None:
            return
        started = time.perf_counter()
        batches = self.buffer.drain_batches()  # rows stay tuples: the store inserts them without pyarrow
        with self.owner.store() as store:
            counts: dict[str, int] = {}
            for name, batch in batches:
                counts[name] = counts.get(name, 0) + (
                    len(batch.rows) if isinstance(batch, RowBatch) else int(batch.num_rows)
                )
            if batches:
                store.ingest_all(batches)
            if self.workloads_ts_s is not None:
                self._guarded("jobs", lambda: self._refresh_jobs(store))
            twin = self.sources.twin
            if twin is not None and self.sources.stepped_s:
                twin.sync(store)  # what another process appended to its log first (its log is one order)
                twin.log_steps(store, self.sources.stepped_s)
                self.sources.stepped_s = 0.0
            if self.newest_ts_s is not None:
                judged = self.live.windows
                self._guarded("detection", lambda: self._detect_and_respond(store))
                # what changes only as windows are judged or time passes: once a window, not every flush
                review = self.live.windows > judged or self.clock() - self.last_review >= self.review_every_s
                if review:
                    self.last_review = self.clock()
                    self._guarded("paging", lambda: self._review_pages(store))
                    self._guarded("closed loop", lambda: self._close_loop(store))
                self._guarded("plans", lambda: self._advance_plans(store))
                self._guarded("alerts", lambda: self._investigate_alerts(store))
            else:
                review = self.clock() - self.last_review >= self.review_every_s
                self.last_review = self.clock() if review else self.last_review
            self._guarded("conditions", lambda: self._conditions(store))
            if len(self.dispatches):
                twin = self.sources.twin
                self._guarded("dispatch", lambda: self.dispatches.judge(store, twin, self.config.node.name))
            if self.dispatcher is not None:
                self._guarded("dispatcher", lambda: self.dispatcher(store) if self.dispatcher else None)
            self._guarded("retention", lambda: self._retention(store))
            self._guarded("report", lambda: self._report(store))
            if review or not self.flushes:
                self._observe_store(store)
        self.metrics.ingested(counts)
        lag_s = (
            0.0 if self.oldest_unflushed_ts_s is None else self.sources.clock() - self.oldest_unflushed_ts_s
        )
        self.metrics.gauge("ingest_lag_seconds", "age of the oldest sample in the last flush", lag_s)
        self.metrics.gauge(
            "flush_duration_seconds", "how long the last flush took", time.perf_counter() - started
        )
        self.metrics.count("flushes_total", "flushes done")
        self.oldest_unflushed_ts_s = None
        self.last_flush = self.clock()
        self.flushes += 1
        self.ready = True

    def _detect_and_respond(self, store: Store) -> None:
        assert self.sources is not None and self.newest_ts_s is not None
        transitions = self.live.advance(store, self.newest_ts_s, self.first_ts_s)
        twin = self.sources.twin
        held: list[Any] = []

        def attached() -> Any:  # the world, attached only when something is filed or executed
            if not held:
                held.append(attach(store, twin=twin, node=self.config.node.name, ticket=self.ticket))
            return held[0]

        self.responder.handle(store, transitions, lambda: desk(store, attached()))
        if store.scalar("SELECT count(*) FROM proposals WHERE status = 'approved'"):
            self._execute_approved(store, attached())
        self.breaker.observe(store, lambda: desk(store, attached()), time.time())  # every 15 s: attaches then
        if self.slack is not None:
            self.slack.run_requested(store, attached())

    def _conditions(self, store: Store) -> None:
        """What the source and the watched collectors say of their sight, as condition incidents."""
        assert self.sources is not None
        report = self.sources.conditions() if self.sources.conditions else ConditionReport()
        now_ts_s = self.sources.clock()
        report.add(self.watch.report(now_ts_s))
        self.conditions.apply(store, report, now_ts_s)

    def _review_pages(self, store: Store) -> None:
        """Holds that ran out, windows that ended, node incidents the fleet covers: paged or exported."""
        self.page_states = self.pager.review(store, self.newest_ts_s)  # exported with the incidents

    def _close_loop(self, store: Store) -> None:
        """Supersede what a node ran, judge what ran, export what this workspace set (closed_loop.py)."""
        assert self.newest_ts_s is not None
        done = close_loop(store, self.newest_ts_s, self.metrics.set_intended)
        if done["superseded"] or done["outcomes"]:
            log.info("closed loop", extra=done)

    def _advance_plans(self, store: Store) -> None:
        """The open plans' step statuses from their proposals and the outcomes just judged; after a failed step
        the next one is proposed (aiops/plans/lifecycle.py)."""
        assert self.sources is not None
        if not store.scalar("SELECT count(*) FROM plans WHERE status = 'open'"):
            return  # nothing to follow: the world is not attached on every flush (docs/BENCHMARKS.md, "Footprint")
        attached = attach(store, twin=self.sources.twin, node=self.config.node.name, ticket=self.ticket)
        changed = advance(desk(store, attached))
        if changed:
            log.info("plans", extra={"changed": changed[:20]})

    def _investigate_alerts(self, store: Store) -> None:
        assert self.newest_ts_s is not None
        done = self.alerts.run(store, self.newest_ts_s, self.to_store_ts_s)
        if done:
            log.info(
                "alerts",
                extra={
                    "handled": len(done),
                    "investigated": self.alerts.investigated,
                    "resolved": self.alerts.resolved,
                    "shed": self.alerts.shed,
                    "waiting": len(self.alerts.waiting),
                },
            )

    def to_store_ts_s(self, wall_ts_s: float) -> float:
        """A wall-clock time (an alert's startsAt) on the store's clock: the twin's runs `--speed` times faster."""
        speed = self.sim.speed if self.sim is not None else 1.0
        return self.source_started_ts_s + (wall_ts_s - self.wall_started_ts_s) * speed

    def _guarded(self, what: str, work: Callable[[], None]) -> None:
        """A step of the flush that fails is logged and counted; the service goes on (the data is stored)."""
        try:
            work()
        except Exception:
            log.exception(f"{what} failed", extra={"step": what})
            self.metrics.count("loop_errors_total", "flush steps that failed (the log says which and why)")

    def _execute_approved(self, store: Store, attached: Any) -> None:
        """Proposals people approved (with `aiops actions approve`, in the chat) run here, where the world is."""
        if attached.actuator is None:
            return
        guard = desk(store, attached)
        for record in guard.records.proposals("approved"):
            if attached.kind == TICKETS_ONLY and record.action.kind != "open_ticket":
                continue  # the fleet files tickets itself; every other action is dispatched to where it acts
            outcome = guard.execute(record.proposal_id)
            log.info(
                "executed",
                extra={
                    "proposal_id": record.proposal_id,
                    "status": outcome.status,
                    "why": outcome.message[:200],
                },
            )

    def _report(self, store: Store) -> None:
        """A scheduled report when one is due (or was missed while the service was down), of the period up to
        the telemetry's clock (the twin's, in a simulation)."""
        assert self.sources is not None
        self.reports.maybe_run(store, self.sources.clock())

    def _retention(self, store: Store) -> None:
        if self.clock() - self.last_retention < RETENTION_EVERY_S:
            return
        self.last_retention = self.clock()
        now = self.sources.clock() if self.sources else time.time()
        deleted = store.apply_retention(self.config.store.retention_days * 86_400.0, now)
        log.info("retention", extra={"deleted": sum(deleted.values())})

    def _observe_store(self, store: Store) -> None:
        open_rows = store.query(
            "SELECT i.incident_id, i.severity, h.root_cause, coalesce(h.component, i.components[1]) AS component, "
            "i.opened_ts_s, h.confidence, i.symptoms "
            "FROM incidents i LEFT JOIN hypotheses h "
            "ON h.incident_id = i.incident_id AND h.rank = 1 WHERE i.resolved_ts_s IS NULL ORDER BY i.incident_id"
        )
        self.metrics.set_incidents(open_rows, self.page_states)
        if self.sources is not None and self.sources.export is not None:
            self.sources.export(self.metrics)
        path = Path(self.config.store.path)
        size = sum(p.stat().st_size for p in (path, Path(str(path) + ".wal")) if p.exists())
        self.metrics.gauge("store_size_bytes", "size of the workspace's DuckDB file and WAL", size)
        self.metrics.gauge(
            "detection_windows", "windows live detection has judged since start", self.live.windows
        )
        self.metrics.gauge("leases", "times the service lent its file to another process", self.owner.leases)
        if self.alert_token:
            self.metrics.total(
                "alerts_received_total", "alerts Alertmanager's webhook brought", self.alert_inbox.accepted
            )
            self.metrics.total(
                "alert_investigations_total", "firing alerts investigated", self.alerts.investigated
            )
            self.metrics.total(
                "alerts_shed_total",
                "firing alerts dropped uninvestigated: the queue was full",
                self.alerts.shed,
            )
            self.metrics.gauge("alerts_waiting", "alerts queued for investigation", len(self.alerts.waiting))
        if self.profiles.enabled:
            self.metrics.total(
                "profiles_total", "profiling runs the incident trigger stored", self.profiles.runs
            )
        if self.outbox.enabled:
            self.metrics.total(
                "notifications_queued_total", "notifications queued (each webhook counts)", self.outbox.queued
            )
            self.metrics.total(
                "notifications_delivered_total", "notifications a webhook accepted", self.outbox.delivered
            )

    # -- probes -----------------------------------------------------------------------------------------------
    def _healthy(self) -> tuple[bool, str]:
        tick_s = self.sources.tick_s if self.sources else 1.0
        silent_s = self.clock() - self.last_tick
        # a source read in flight (the fleet's) holds the loop up to its own deadline: alive, maybe not ready
        patience_s = self.sources.patience_s if self.sources else 0.0
        if silent_s > max(10.0, 10 * tick_s, patience_s):
            return False, f"the loop has not ticked for {silent_s:.0f} s"
        return True, "ok"

    def _ready(self) -> tuple[bool, str]:
        """Ready once the first flush is done, and while the service sees: not while its source is blind or a
        watched collector reads nothing (the reason says which, since when and why)."""
        if not self.ready:
            return False, "starting: no flush yet"
        stated = self.conditions.readiness()
        if stated:
            return False, f"blind: {stated}"
        live = self.sources.blind() if self.sources is not None and self.sources.blind else None
        return (False, live) if live else (True, "ready")
