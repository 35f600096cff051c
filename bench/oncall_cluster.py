"""The cluster of the operator's day, as the product runs it, on one simulated clock.

One twin (`aiops.sim.World`) is the cluster: it is stepped once per simulated second here, and every node agent
reads its own node's slice of it through the collectors `aiops run --sim S --node N` runs (its NVML, the fabric
adapter's rows it owns, its sysfs tree), with the product's `Service` doing the rest (store, live detection,
diagnosis, filing, execution of approved proposals, notifications). A facility agent (`--node facility`) exports
the racks' sensors and the DCIM caps. Unlike `aiops run`, the agents share the one world instead of each stepping a
copy (N copies would cost N steps a second on 2 cores): an action a node executes changes the cluster every agent
reads, as it would on real hardware.

Every scrape interval each agent's `/metrics` (and the facility's `/metrics/facility`) is rendered with the
scrape's timestamp and imported into a real VictoriaMetrics (`/api/v1/import/prometheus`); `aiops fleet`'s
`Service` reads it back through its Prometheus source (aiops/fleet/source.py) and dispatches what people approved
to the node agents. The dispatch goes through the dispatcher's `post` seam straight into the node's dispatch inbox,
judged at once as the node's loop would (`DispatchInbox.run`): over HTTP the request would wait for that node's
loop, which in one process is this loop.

Wall-clock time is the simulated clock for the whole process (`time_machine`, C-level, so clocks captured as
default arguments follow too): guardrails' expiries, rate limits, approvals' lifetimes and the notification
queue see simulated seconds, as they would see real ones in a real cluster. Notifications are delivered by
pumping each service's queue after its flush (the service's own thread pumps every wall second, which here would
be tens of simulated seconds) to loopback receivers (bench/oncall_people.py).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from aiops.config import parse_config
from aiops.fleet.dispatch import FleetDispatcher, NodeAnswer
from aiops.fleet.source import FleetSetup, fleet_sources
from aiops.runtime.world import attach
from aiops.scenarios import Scenario
from aiops.service.node_slice import (
    EVERY_NODE_TABLES,
    FACILITY,
    FACILITY_TABLES,
    JOB_TABLES,
    NODE_COLUMN,
    NODE_TABLES,
    job_homes,
)
from aiops.service.service import Service
from aiops.service.sim_sources import node_slice, sliced_inventory
from aiops.service.sources import Source, Sources
from aiops.sim.sysfs import SimSysfs
from aiops.sim.telemetry import SimFabricCollector, inventory
from aiops.sim.twin import Twin, record_run
from aiops.sim.world import World
from aiops.store import Store
from collectors.base import RowBatch, to_arrow
from collectors.nvml import NvmlCollector
from guardrails.dispatched import parse_dispatch

log = logging.getLogger("bench.oncall")
SYSFS_INTERVAL_S = 5.0  # the sysfs collectors' default interval ([collectors.sysfs] interval_s)


def _tmpfs() -> str | None:
    """/dev/shm where there is one: the twin's sysfs files are rewritten before every read."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class SharedRows:
    """The fabric adapter (the whole cluster's rows) read once per simulated second and split by owner in one
    pass, as `NodeSlice` assigns them: a node's own rows (its `node` column), a job's rows to the node of its
    rank 0, the lane rules to every node, the racks' sensors and DCIM signals to the facility."""

    def __init__(self, inner: SimFabricCollector, homes: dict[str, str], nodes: list[str]) -> None:
        self.inner, self.homes, self.nodes = inner, homes, nodes
        self.name = inner.name
        self._at: float | None = None
        self._parts: dict[str, dict[str, RowBatch]] = {}

    def part(self, owner: str, now_ts_s: float) -> dict[str, RowBatch]:
        if self._at != now_ts_s:
            self._parts, self._at = self._split(self.inner.rows(now_ts_s)), now_ts_s
        return self._parts.get(owner, {})

    def _split(self, batches: dict[str, RowBatch]) -> dict[str, dict[str, RowBatch]]:
        parts: dict[str, dict[str, RowBatch]] = defaultdict(dict)
        every: dict[str, RowBatch] = {}
        for table, batch in batches.items():
            if table in NODE_TABLES or table in JOB_TABLES:
                at = batch.columns.index(NODE_COLUMN.get(table, "node") if table in NODE_TABLES else "job")
                for row in batch.rows:
                    owner = str(row[at]) if table in NODE_TABLES else self.homes.get(str(row[at]), "")
                    parts[owner].setdefault(table, RowBatch(batch.columns)).rows.append(row)
            elif table in EVERY_NODE_TABLES:
                every[table] = batch
            elif table in FACILITY_TABLES:
                parts[FACILITY][table] = batch
        if every:
            for node in self.nodes:
                parts[node].update(every)
        return parts


class OwnRows:
    """One agent's share of `SharedRows`, as a row collector."""

    def __init__(self, shared: SharedRows, owner: str) -> None:
        self.shared, self.owner = shared, owner
        self.name = shared.name

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        return self.shared.part(self.owner, now_ts_s)

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))


@dataclass
class Agent:
    name: str  # node<N>, `facility` or `fleet`
    service: Service
    twin: Twin | None = None
    flushes_seen: int = 0
    down: bool = False  # stopped: it neither collects nor exports (a lost node agent)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def exposition(metrics: Iterable[Metric], ts_s: float, target: Mapping[str, str] | None = None) -> str:
    """Prometheus text (0.0.4) of `metrics`, every sample stamped `ts_s` in milliseconds, for VictoriaMetrics'
    import: what a scrape at `ts_s` stores (prometheus_client's writer, less HELP/TYPE lines, plus the stamp).
    `target`: the scrape target's labels (`job`, `instance`), added where a sample lacks them, as Prometheus does
    with `honor_labels: true` (the chart's PodMonitor): a job's own `job` label stays."""
    stamp = f" {round(ts_s * 1000)}\n"
    out: list[str] = []
    extra = dict(target or {})
    for metric in metrics:
        for sample in metric.samples:
            if sample.name.endswith("_created"):
                continue
            labels = {**{k: v for k, v in extra.items() if k not in sample.labels}, **sample.labels}
            value = floatToGoString(sample.value)  # type: ignore[no-untyped-call]
            if labels:
                text = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
                out.append(f"{sample.name}{{{text}}} {value}{stamp}")
            else:
                out.append(f"{sample.name} {value}{stamp}")
    return "".join(out)


def with_timestamps(text: str, ts_s: float, target: Mapping[str, str] | None = None) -> str:
    """Exposition text (no timestamps) with every sample stamped `ts_s` in milliseconds (and `target`'s labels
    where a sample lacks them)."""
    stamp = f" {round(ts_s * 1000)}"
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, braces, rest = line.partition("{")
        if not braces:
            name, _, rest = line.partition(" ")
            rest = "} " + rest
        own = rest.split("}", 1)[0]
        missing = [f'{k}="{_escape(v)}"' for k, v in (target or {}).items() if f"{k}=" not in own]
        if missing:
            line = name + "{" + ",".join(missing) + ("," if own else "") + rest
        out.append(f"{line}{stamp}\n")
    return "".join(out)


def target_labels(agent: str) -> dict[str, str]:
    """The scrape target's labels Prometheus gives an agent's series (the chart's jobs; port 9484)."""
    return {"job": "aiops-facility" if agent == FACILITY else "aiops-node", "instance": f"{agent}:9484"}


def scrape_result(agent: str, ts_s: float, down: bool, missed: bool) -> dict[str, Any]:
    """A target's newest scrape as Prometheus's targets API says it: a stopped agent's is refused (nothing listens
    on its port), a missing scrape's timed out (one late scrape), else up."""
    target = target_labels(agent)
    url = f"http://{target['instance']}/metrics"
    error = ""
    if down:
        error = f'Get "{url}": dial tcp 198.18.0.1:9484: connect: connection refused'
    elif missed:
        error = f'Get "{url}": context deadline exceeded'
    stamp = datetime.fromtimestamp(ts_s, UTC).isoformat().replace("+00:00", "Z")
    return {
        "labels": target,
        "scrapeUrl": url,
        "lastError": error,
        "lastScrape": stamp,
        "health": "down" if error else "up",
    }


@dataclass
class ClusterSetup:
    work: Path
    vm_url: str
    pagerduty_url: str
    routing_key_file: Path
    dcim_url: str
    allowed_signers: Path
    approvers: dict[str, list[str]]
    flush_s: float = 15.0
    step_s: float = 15.0
    console_url: str = "http://console.example/"
    node_token_file: Path | None = None
    targets_url: str = ""  # [fleet] targets_url: the day's scraper's targets API (Cluster.targets), "" none
    extra: dict[str, Any] = field(default_factory=dict)  # more config, merged into every service's
    # who has the paging sink: `fleet` (docs/NOTIFY.md "Where to page from": the fleet, which covers the node
    # agents' incidents), or `every` tier on its own (node agents with sinks of their own, the fleet too)
    page_from: str = "fleet"
    ticket_url: str = ""  # [notify.ticket] jira url (the loopback Jira), empty: open_ticket is a note
    ticket_token_file: Path | None = None
    runbook: str = ""  # [guardrails] runbook of every tier: a signed standing runbook (docs/GUARDRAILS.md)


class Cluster:
    def __init__(self, scenario: Scenario, world: World, setup: ClusterSetup) -> None:
        self.scenario, self.world, self.setup = scenario, world, setup
        homes = job_homes(inventory(world)["job_ranks"].to_pylist())
        self.fabric = SharedRows(SimFabricCollector(world), homes, list(world.layout.node_names))
        self.sysfs = SimSysfs(world, tempfile.mkdtemp(prefix="aiops-oncall-sysfs-", dir=_tmpfs()))
        self.agents: dict[str, Agent] = {}
        for node in [*world.layout.node_names, FACILITY]:
            self.agents[node] = self._agent(node)
        self.fleet = self._fleet()
        self.drop: Callable[[str], bool] = lambda _node: False  # a scrape of this agent goes missing
        self.scrapes: dict[
            str, dict[str, Any]
        ] = {}  # instance -> its newest scrape, as a targets API says it

    # -- building ----------------------------------------------------------------------------------------------
    def _document(self, name: str) -> dict[str, Any]:
        s = self.setup
        webhook = {"kind": "pagerduty", "url": s.pagerduty_url, "routing_key_file": str(s.routing_key_file)}
        notify: dict[str, Any] = {"console_url": s.console_url}
        if s.page_from == "every" or name == "fleet":
            notify["webhooks"] = [webhook]
        if s.ticket_url:
            notify["ticket"] = {
                "kind": "jira",
                "url": s.ticket_url,
                "project": "OPS",
                "token_file": str(s.ticket_token_file or ""),
            }
        return {
            "store": {"path": str(s.work / f"{name}.duckdb"), "flush_interval_s": s.flush_s},
            "http": {"listen": ""},
            "notify": notify,
            "guardrails": {
                "allowed_signers": str(s.allowed_signers),
                "approvers": s.approvers,
                **({"runbook": s.runbook} if s.runbook else {}),
            },
            **s.extra,
        }

    def _clock(self) -> float:
        return float(self.world.elapsed_s)

    def _agent(self, node: str) -> Agent:
        world = self.world
        twin = Twin(world, node=node)
        part = node_slice(world, node)

        def sources(store: Store) -> Sources:
            if not store.scalar("SELECT count(*) FROM sim_runs"):
                record_run(store, self.scenario, None, 0.0, epoch_ts_s=world.epoch_ts_s, node=node)
                store.ingest_many(sliced_inventory(world, part))
            found = [Source("sim-fabric", OwnRows(self.fabric, node), 1.0)]
            if node != FACILITY:
                n = world.layout.node_names.index(node)
                found.insert(0, Source(f"nvml-{node}", NvmlCollector(world.nvml(n), node), 1.0))
                found.append(Source(f"sysfs-{node}", self.sysfs.collector(n), SYSFS_INTERVAL_S))
            return Sources(
                found, lambda: float(world.now_ts_s), tick_s=1.0, twin=twin, describe=f"twin node {node}"
            )

        config = parse_config(self._document(node), f"<{node}>")
        rack = "" if node == FACILITY else str(part.rack)
        identity = config.node.model_copy(update={"name": node, "rack": rack})  # as `--node` sets it
        config = config.model_copy(update={"node": identity})
        service = Service(config, sources=sources, clock=self._clock, sleep=lambda _s: None)
        return Agent(node, service, twin)

    def _fleet(self) -> Agent:
        s = self.setup
        document = self._document("fleet")
        # a job's restart goes to one node agent of the job, whose executors (its twin here) restart it: the
        # twin's jobs have no scheduler the fleet could reach (a real cluster names [fleet.scheduler])
        document["fleet"] = {"prometheus": s.vm_url, "step_s": s.step_s, "job_steps": "node_agent"}
        if s.targets_url:
            document["fleet"]["targets_url"] = s.targets_url
        document["facility"] = {"dcim": s.dcim_url}
        from aiops.cli.fleet import FLEET_NAME
        from aiops.config import NodeConfig

        config = parse_config(document, "<fleet>")
        detection = config.detection.model_copy(update={"window_s": max(config.detection.window_s, s.step_s)})
        node = NodeConfig.model_construct(name=FLEET_NAME, rack="", hosts=config.node.hosts)
        config = config.model_copy(update={"detection": detection, "node": node})
        setup = FleetSetup(config.fleet, None, config.facility)
        wall = lambda: float(self.world.now_ts_s)  # noqa: E731 (the fleet's reading clock)
        dispatcher = FleetDispatcher(config.fleet, "", name=FLEET_NAME, post=self._post, clock=wall)
        service = Service(
            config,
            sources=lambda store: fleet_sources(store, setup, clock=wall),
            dispatcher=dispatcher,
            clock=self._clock,
            sleep=lambda _s: None,
        )
        return Agent(FLEET_NAME, service)

    def _post(self, url: str, body: dict[str, Any], token: str, timeout_s: float) -> NodeAnswer:
        """The fleet's dispatch to a node, as `POST /api/dispatch` would carry it (the body as JSON bytes, parsed
        by the route's parser), judged by the node's inbox at once."""
        host = url.removeprefix("http://").split(":", 1)[0].split("/", 1)[0]
        agent = self.agents.get(host)
        if agent is None or agent.down:
            return NodeAnswer(None, {}, f"ConnectionRefusedError: {host} does not answer")
        dispatch = parse_dispatch(json.dumps(body).encode())
        inbox = agent.service.dispatches
        future = inbox.put(dispatch)
        if future is None:
            return NodeAnswer(503, {"error": "busy: too many dispatches wait; retry"})
        with agent.service.owner.store() as store:  # judged and run here (no scheduler: nothing runs outside)
            inbox.judge(store, attach(store, twin=agent.twin, view=agent.service.scheduler_view), host)
        answer = future.result(timeout=1.0)
        return NodeAnswer(answer.http_status, answer.json())

    # -- life ---------------------------------------------------------------------------------------------------
    def every(self) -> Iterator[Agent]:
        yield from self.agents.values()
        yield self.fleet

    def start(self) -> None:
        for agent in self.every():
            agent.service.start()  # a node agent declares its inventory in its exports, as `aiops run` does
            agent.service.outbox.stop(timeout_s=5.0)  # delivered by `pump` on the simulated clock instead

    def close(self) -> None:
        for agent in self.every():
            service = agent.service
            try:
                service.flush()
            finally:
                if service.sources is not None:
                    service.sources.close()
                service.owner.close()
        self.sysfs.close()
        shutil.rmtree(self.sysfs.root, ignore_errors=True)  # made here (mkdtemp): the tree is ours to remove

    def second(self, on_scrape: Callable[[float], None] | None = None) -> None:
        """One simulated second: the world steps, every agent ticks (collects; flushes when due), a scrape
        when one is due (exports imported, then `on_scrape`), the fleet ticks."""
        self.world.step(1.0)
        for agent in self.agents.values():
            if not agent.down:
                agent.service.sources.stepped_s += 1.0  # type: ignore[union-attr]
                self._tick(agent)
        if round(self.world.elapsed_s) % round(self.setup.step_s) == 0:
            self.scrape(self.world.now_ts_s, frozenset(a for a in self.agents if self.drop(a)))
            if on_scrape is not None:
                on_scrape(self.world.now_ts_s)
        self._tick(self.fleet)

    def _tick(self, agent: Agent) -> None:
        agent.service.tick()
        if agent.service.flushes != agent.flushes_seen:
            agent.flushes_seen = agent.service.flushes
            agent.service.outbox.pump_once(agent.service.workspace)

    def exposition(self, agent: Agent, ts_s: float, scraped: bool = True) -> str:
        """What a scrape of `agent` at `ts_s` stores: its series and `up` 1, or `up` 0 alone (down, or the
        scrape failed)."""
        target = target_labels(agent.name)
        up = with_timestamps(
            f'up{{job="{target["job"]}",instance="{target["instance"]}"}} {int(scraped)}', ts_s
        )
        if not scraped:
            return up
        text = exposition(agent.service.registry.collect(), ts_s, target)
        if agent.name == FACILITY:
            text += with_timestamps(agent.service.metrics.facility_text(), ts_s, target)
        return text + up

    def scrape(self, ts_s: float, skip: frozenset[str] = frozenset()) -> int:
        """Every agent's scrape at `ts_s` into VictoriaMetrics (`skip`: scrapes that failed); returns the bytes."""
        from bench.victoria import force_flush, import_text

        body = "".join(
            self.exposition(a, ts_s, not a.down and a.name not in skip) for a in self.agents.values()
        ).encode()
        for a in self.agents.values():
            self.scrapes[target_labels(a.name)["instance"]] = scrape_result(
                a.name, ts_s, a.down, a.name in skip
            )
        if body:
            import_text(self.setup.vm_url, body)
            force_flush(self.setup.vm_url)
        return len(body)

    def targets(self) -> dict[str, Any]:
        """`GET /api/v1/targets` of the day's scraper (Prometheus's answer, active targets only)."""
        return {
            "status": "success",
            "data": {"activeTargets": list(self.scrapes.values()), "droppedTargets": []},
        }

    def dcim_document(self) -> dict[str, Any]:
        return self.agents[FACILITY].service.metrics.dcim_document()
