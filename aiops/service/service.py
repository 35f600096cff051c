"""`aiops run`: one long-running service per node (and per workspace).

The loop, each tick: step the twin (sim), collect from every source that is due (timed; a collector's failure
is a `collector_errors` row, never the loop's), buffer the rows; when a detection window has closed in them
(`[store] window_flush_s` after the last flush at the earliest; between windows the rows are held in `<db>.held`
every `flush_interval_s`: held.py), at the latest every 2 x `flush_interval_s`, and at once when the source says
so (the fleet when its sight changes or a node agent is lost or back, `Sources.urgent`): ingest the
batch in one transaction on the file the service holds open, record the twin's steps, run live detection over the new
complete windows, diagnose and file what changed, execute proposals people approved (on the world the
workspace acts on), judge what ran once its window passed and export what it set (closed_loop.py), queue
notifications, investigate the alerts Alertmanager's webhook brought
(alert_investigate.py), write the scheduled report when due ([report]), start a profiling run of this host's
CUDA processes in a background thread when a diagnosis asks for one ([profile], profile_trigger.py); hourly: retention. Around it: the service lock and leases
(aiops/service/owner.py), the one HTTP listener (metrics, health, API, the Alertmanager webhook, and the console
at `/` when one is given: http_stack.py, web.py, server.py), notification delivery in its own thread. The flush's
steps are named functions in flush_steps.py (its table says when each runs and whether the workspace is open:
the fleet's POSTs to node agents run with it closed).
SIGTERM/SIGINT end the loop after a last flush (exit 0); kill -9 loses at most the rows not yet flushed nor held (the
rows of the last `flush_interval_s`, 5 s by default).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.registry import CollectorRegistry

from aiops.config import (
    Config,
    node_of,
    store_block_size,
    store_checkpoint_mb,
    store_memory_limit_mb,
    store_threads,
)
from aiops.detect.incidents import incident_prefix
from aiops.models import Hypothesis, Incident
from aiops.runtime.world import Attached, attach, scheduler_view
from aiops.service import collecting, http_stack
from aiops.service import flush_steps as steps
from aiops.service.alert_investigate import AlertInvestigator
from aiops.service.alerts_in import AlertInbox
from aiops.service.api import Api
from aiops.service.breaker_metrics import BreakerMetrics
from aiops.service.closed_loop import LoopMemory
from aiops.service.conditions import CollectorWatch, ConditionBook
from aiops.service.dispatch_in import DispatchInbox
from aiops.service.held import HeldRows
from aiops.service.http_stack import Companion as Companion  # re-exported: `aiops run` sets one
from aiops.service.live import LiveDetection
from aiops.service.metrics import MetricsCache
from aiops.service.outbox import Outbox
from aiops.service.owner import FileOwner, OwnedWorkspace
from aiops.service.pager import Pager, PageState
from aiops.service.profile_trigger import ProfileTrigger
from aiops.service.reports import ReportSchedule, check_paths
from aiops.service.respond import Notify, Responder
from aiops.service.server import WebServer
from aiops.service.sources import (
    Sources,
    check_node,
    config_resolvers,
    host_sources,
    register_topology,
)
from aiops.service.unchanged import Unchanged
from aiops.store import Store
from aiops.store.maintenance import active_windows, matching, membership
from collectors.base import RowBatch, RowBuffer
from guardrails import witness
from guardrails.breaker_inputs import HeldView

if TYPE_CHECKING:  # the twin's scenario and lanes policy: loaded by `aiops run --sim` alone
    from aiops.datapath.policy import Policy
    from aiops.integrations.ticket import TicketActuator
    from aiops.scenarios import Scenario
    from aiops.service.slack_actions import SlackChat

log = logging.getLogger("aiops.service")


def held_by_maintenance(store: Store, incident: Incident) -> str | None:
    """The maintenance window (not a silence) holding every part of `incident` now, by id; None when none."""
    window = matching(
        active_windows(store, time.time()), incident.components, {}, membership(store), actions=True
    )
    return window.window_id if window is not None else None


@dataclass(frozen=True)
class SimSetup:
    scenario: Scenario
    lanes_policy: Policy | None = None
    speed: float = 1.0
    node: str | None = None  # one node agent of the twin's cluster (sources.py); None: the whole cluster
    epoch_ts_s: float | None = None  # the wall time of the twin's simulated second 0 (default: the start)


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
        sleep: Callable[[float], None] | None = None,
        sources: Callable[[Store], Sources] | None = None,
        dispatcher: steps.Dispatcher | None = None,
        kube_api: Any = None,
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
        self.clock = clock
        # between ticks: the real loop naps (`_nap`: a fleet's dispatch is judged as it arrives); a test's or
        # a bench's own sleep otherwise
        self.sleep = sleep if sleep is not None else self._nap
        # the loop runs on wall time (`aiops run`, `aiops fleet`), not on a clock a test or a bench holds, whose
        # flushes come exactly at its cadence
        self.on_wall_time = sleep is None
        self.owner = FileOwner(
            config.store.path,
            memory_limit_mb=store_memory_limit_mb(config),
            threads=store_threads(config),
            # a node agent's statements read seconds of one node: the optimizer passes that pay off on large
            # tables are skipped (owner.py LEAN_PLANNER_SKIPS); the fleet's pivot thousands of GPUs
            lean_planner=config.node.name != "fleet",
            allocator_flush_mb=config.store.allocator_flush_mb,
            checkpoint_mb=store_checkpoint_mb(config),
            block_size=store_block_size(config),  # a workspace the service creates: 16 KB blocks on a node
            guardrails=config.guardrails,
            scheduler=config.scheduler,
        )
        # a node agent hands what DuckDB freed back to the kernel after each flush (owner.release_memory); the
        # fleet's cycles free and take back hundreds of MB a flush
        self.release_memory = config.node.name != "fleet"
        self.workspace = OwnedWorkspace(self.owner)
        # [chatops.slack]: incident messages with buttons, and POST /api/slack/actions (slack_actions.py)
        self.slack: SlackChat | None = None
        if config.chatops.slack.enabled:  # its modules (the Slack API, button actions) loaded only then
            from aiops.service.slack_actions import SlackChat

            self.slack = SlackChat(config, self.workspace)
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
            # only a fleet stores rank rows between windows: a node agent skips that read each flush
            ranks_between_windows=config.node.name == "fleet",
        )
        self.unchanged = Unchanged()  # what a flush skips when nothing changed it (unchanged.py)
        self.loop_memory = LoopMemory()  # what the closed loop read last (closed_loop.py)
        if not self.live.ranks_between_windows:  # a node agent's inventory changes only as it writes it
            self.live.inventory_moved = self.unchanged.take_inventory_moved
        # [notify.ticket]: open_ticket files in Jira or ServiceNow (its token file read now); else a note
        self.ticket: TicketActuator | None = None
        if config.notify.ticket.enabled:
            from aiops.integrations.ticket import TicketActuator

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
            page_from=config.notify.severity.page_from,
            open_s=3.0 * config.detection.window_s,
        )
        if (
            config.node.name != "fleet"
        ):  # a node agent reads no other agent's exports (pager.py, unchanged.py)
            self.pager.covers_nodes = False
            self.pager.epochs = self.unchanged.epochs

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
            self.outbox.sinks,
            config.node.name,
        )
        self.buffer = RowBuffer()
        store_config = config.store
        self.window_flushes = 0 < store_config.window_flush_s < store_config.flush_interval_s  # _window_due
        # between windows the rows go to <db>.held, the workspace is written once a window (held.py)
        self.holding = self.window_flushes and store_config.hold_rows
        self.held = HeldRows(store_config.path)
        self.write_every_s = store_config.flush_interval_s * (2.0 if self.holding else 1.0)
        self.last_hold = 0.0
        self.token = token
        self.alert_token = alert_token  # [alertmanager_in]: empty, the route is off
        self.alert_inbox = AlertInbox()
        self.dispatches = DispatchInbox()  # POST /api/dispatch: judged and run in the flush (dispatch_in.py)
        self.dispatcher = dispatcher  # `aiops fleet`: sends approved proposals to their nodes (aiops/fleet)
        # tests: a CoreV1Api for [scheduler] kind = "kubernetes" (else one from its config)
        self.kube_api = kube_api
        # executions the flush claimed whose backend calls another system: run after it (flush_steps.act_outside)
        self.claimed: list[steps.Later] = []
        # [scheduler]'s view of drained or cordoned nodes for the breaker, read before each flush holds the
        # workspace (flush_steps.read_views); the desks inside read this copy
        reader = scheduler_view(config.scheduler, config.node.name, kube_api)
        self.scheduler_view = HeldView(reader) if reader is not None else None
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
        self.api: Api | None = None  # its JSON API, while it listens: its kept lists read again in flush()
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
        self.said_unavailable: set[tuple[str, str]] = set()  # (collector, why) logged (collecting.py)
        self.workloads_ts_s: float | None = None  # the workload collector's last collect, until refresh_jobs
        self.workloads_node: str | None = None

    # -- life -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        check_paths(self.owner.db_path, self.config)  # one line, exit 2, before anything is started
        self.owner.start()
        with self.owner.store() as store:
            witness.store_path(store)  # one witness per store: another config's is refused at start
            self.held.restore(store)  # what a killed run held between its writes (held.py)
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
            if self.sources.declares_inventory:  # a node agent's inventory (the fleet's source says not: its
                # re-export would be read back, a Prometheus scraping it too, as a second instance per node)
                self.metrics.inventory(  # node -> rack, GPU index and UUID, the jobs' ranks: export labels
                    store.query("SELECT component, kind, rack, node, idx, uuid, device FROM topology"),
                    store.query("SELECT job, rank, gpu, node, nic FROM job_ranks"),
                )
        self.profiles.start()
        self.wall_started_ts_s, self.source_started_ts_s = time.time(), self.sources.clock()
        if self.config.http.listen:
            self.http = http_stack.serve(self)
        self.outbox.start(self.workspace)
        if self.slack is not None:
            self.slack.start()
        if self.companion is not None and self.http is not None:
            self.companion.start(self.http.host, self.http.port)
        self.last_tick = self.last_flush = self.last_hold = self.last_retention = self.clock()
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
            collecting.collect(self, source.name, source.collector, source.interval_s)
        self.last_tick = self.clock()
        # a dispatch waiting (one that came during the tick) is judged now, as the nap judges one
        urgent = (self.sources.urgent is not None and self.sources.urgent()) or bool(len(self.dispatches))
        since_s = self.last_tick - self.last_flush
        # rows are held only while detection judges windows: a closing window writes them
        holding = self.holding and self.live.until_ts_s is not None
        every_s = self.write_every_s if holding else self.config.store.flush_interval_s
        if urgent or since_s >= every_s or self._window_due(since_s):
            self.flush()
        elif holding and self.last_tick - self.last_hold >= self.config.store.flush_interval_s:
            self.last_hold = self.last_tick  # the rows not yet written, to <db>.held (held.py), or written
            if not self.held.keep(self.buffer.peek_batches()):
                self.flush()
        elif not self.flushes and self.on_wall_time:
            # the first tick's rows flushed at once: ready (/readyz) a tick after start, not a flush interval
            # after; the flushes keep their cadence from the start
            since_s = self.last_flush
            self.flush()
            self.last_flush = since_s
        self.sleep(self.sources.wait_s(self.clock() - begun))

    def _window_due(self, since_s: float) -> bool:
        """A detection window has closed in the rows held and the last write is `[store] window_flush_s` old:
        written and judged now, so a window is judged as soon as before while the rows between windows are held
        (`<db>.held`, held.py) or written every `flush_interval_s` (one write a window instead of one every 2 s:
        most of a node agent's CPU is a fixed cost per statement, docs/BENCHMARKS.md "Footprint")."""
        if not self.window_flushes or since_s < self.config.store.window_flush_s:
            return False
        until_ts_s = self.live.until_ts_s
        if until_ts_s is None or self.newest_ts_s is None:
            return False
        return self.newest_ts_s >= until_ts_s + self.live.window_s - 1e-9

    def _nap(self, wait_s: float) -> None:
        """The real loop's sleep between ticks: a fleet's dispatch arriving meanwhile (`POST /api/dispatch`,
        dispatch_in.py) is judged at once in a flush, then the rest of `wait_s` slept. No tick comes early
        (the twin keeps its pace); the dispatch waits for one flush, not for `flush_interval_s`."""
        end_s = time.monotonic() + wait_s
        while (left_s := end_s - time.monotonic()) > 0 and not self.stopping.is_set():
            if not self.dispatches.arrived.wait(left_s):
                return
            self.dispatches.arrived.clear()
            if len(self.dispatches):
                self.flush()

    def flush(self) -> None:
        """Ingest what was collected, then detect, diagnose, file, execute, notify: one transaction's worth."""
        if self.sources is None:
            return
        started = time.perf_counter()
        batches = self.buffer.drain_batches()  # rows stay tuples: the store inserts them without pyarrow
        self._guarded("scheduler view", lambda: steps.read_views(self))  # the workspace is not held yet
        with self.owner.store() as store:
            counts: dict[str, int] = {}
            for name, batch in batches:
                counts[name] = counts.get(name, 0) + (
                    len(batch.rows) if isinstance(batch, RowBatch) else int(batch.num_rows)
                )
            twin = self.sources.twin
            self.unchanged.begin(self.owner.holds, set(counts), twin)  # what it may skip: unchanged.py
            try:
                self._held_flush(store, batches)
                api = self.api
                if api is not None:  # within the hold (no other hold counted): kept_answers.py
                    self._guarded("kept lists", lambda: api.warm(store))
            finally:
                self.unchanged.end(self.owner.holds, twin)
        if self.release_memory:
            self._guarded("memory", self.owner.release_memory)
        if self.claimed:
            self._guarded("actions outside", lambda: steps.act_outside(self))
        if self.dispatcher is not None:
            self._guarded("dispatcher sends", lambda: steps.dispatch_outside(self))
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
        self.last_flush = self.last_hold = self.clock()
        self.flushes += 1
        self.ready = True

    def _held_flush(self, store: Store, batches: list[tuple[str, Any]]) -> None:
        """The flush's steps with the workspace held (flush_steps.py has them in order)."""
        assert self.sources is not None
        if batches:
            store.ingest_all(batches)
            if self.release_memory:  # the transaction's own copy of the rows, freed by its COMMIT, back first
                self._guarded("memory", self.owner.release_memory)
        self.held.clear()  # the workspace has them now
        if self.workloads_ts_s is not None:
            self._guarded("jobs", lambda: steps.refresh_jobs(self, store))
        twin = self.sources.twin
        if twin is not None and self.sources.stepped_s:
            twin.sync(store)  # what another process appended to its log first (its log is one order)
            twin.log_steps(store, self.sources.stepped_s)
            self.sources.stepped_s = 0.0
        if self.newest_ts_s is not None:
            judged = self.live.windows
            self._guarded("detection", lambda: steps.detect_and_respond(self, store))
            # what changes only as windows are judged or time passes: once a window, not every flush
            review = self.live.windows > judged or self.clock() - self.last_review >= self.review_every_s
            if review:
                self.last_review = self.clock()
                self._guarded("paging", lambda: steps.review_pages(self, store))
                self._guarded("closed loop", lambda: steps.judge_closed_loop(self, store))
            self._guarded("plans", lambda: steps.advance_plans(self, store))
            self._guarded("alerts", lambda: steps.investigate_alerts(self, store))
        else:
            review = self.clock() - self.last_review >= self.review_every_s
            self.last_review = self.clock() if review else self.last_review
        self._guarded("conditions", lambda: steps.conditions(self, store))
        if len(self.dispatches):
            twin = self.sources.twin
            self._guarded(
                "dispatch",
                lambda: self.dispatches.judge(
                    store,
                    attach(store, twin=twin, kube_api=self.kube_api, view=self.scheduler_view),
                    self.config.node.name,
                    self.claimed.append,
                ),
            )
            # what a dispatch set is reviewed (the closed loop exports it: `aiops_intended_state`) at the
            # next flush, not a detection window later
            self.last_review = float("-inf")
        if self.dispatcher is not None:  # made ready here, sent below with the workspace closed
            self._guarded("dispatcher", lambda: steps.dispatch_ready(self, store))
        self._guarded("retention", lambda: steps.retention(self, store))
        self._guarded("report", lambda: steps.report(self, store))
        if review or not self.flushes:
            steps.export_store(self, store)

    def attach(self, store: Store) -> Attached:
        """This service's world over `store`, in its flush: the twin it holds, its node, its ticket sink, and
        the scheduler's view as last read outside the workspace (nothing asks the scheduler in here)."""
        return attach(
            store,
            twin=self.sources.twin if self.sources is not None else None,
            node=self.config.node.name,
            kube_api=self.kube_api,
            ticket=self.ticket,
            view=self.scheduler_view,
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

    # -- probes -----------------------------------------------------------------------------------------------
    def _healthy(self) -> tuple[bool, str]:
        return http_stack.healthy(self)

    def _ready(self) -> tuple[bool, str]:
        return http_stack.ready(self)
