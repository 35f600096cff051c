"""The cluster's situation as on-call asks about it, from stored rows: the incidents open now (this workspace's,
and on the fleet the node agents' own that it read from their exports), ranked; which of them touch a rack, a
node, a GPU, a NIC or a job; and the jobs and ranks they reach.

"Touch": an incident is about its components and its top hypothesis' component (its parts). A part touches a
hardware component when one holds the other: `node4/gpu1` touches `node4`, `rack1` (node4's rack) and `fleet`,
and `rack1` touches every node of rack1 and their GPUs and NICs. A part touches a job when it is the job, or it
holds or is held by a GPU or node one of the job's ranks runs on. A node agent's incident is about its component
and its node; it is listed with the fleet incident that covers it (`incident_pages.covered_by`, one page per
problem) when there is one.

Ranked: severity (critical, warning, info), then the worst job slowdown and the GPUs affected (the impact that
set the severity, aiops/detect/severity.py), then the newest first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aiops.config_notify import SeverityConfig
from aiops.detect.severity import impact
from aiops.labels import node_of
from aiops.models import Diagnosis, Incident
from aiops.store import Store
from aiops.store.conditions import condition_of

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
NODE_OPEN_S = 60.0  # a node agent's incident is open while the fleet saw it in its newest minute of reads


@dataclass(frozen=True)
class Rank:
    job: str
    rank: int
    gpu: str
    node: str
    nic: str = ""


@dataclass
class Places:
    """The topology as these answers need it: which rack holds a node, where each job's ranks run."""

    rack_of: dict[str, str] = field(default_factory=dict)
    racks: frozenset[str] = frozenset()
    ranks: list[Rank] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, store: Store) -> Places:
        rows = store.query("SELECT component, kind, rack FROM topology WHERE kind IN ('rack', 'node')")
        ranks = store.query("SELECT job, rank, gpu, node, nic FROM job_ranks ORDER BY job, rank")
        jobs = [str(r["job"]) for r in store.query("SELECT job FROM jobs ORDER BY job")]
        return cls(
            rack_of={str(r["component"]): str(r["rack"]) for r in rows if r["kind"] == "node" and r["rack"]},
            racks=frozenset(str(r["component"]) for r in rows if r["kind"] == "rack"),
            ranks=[
                Rank(str(r["job"]), int(r["rank"]), str(r["gpu"]), str(r["node"]), str(r["nic"] or ""))
                for r in ranks
            ],
            jobs=jobs,
        )

    def chain(self, component: str) -> list[str]:
        """`component` and what holds it: `node4/gpu1` -> node4/gpu1, node4, rack1, fleet."""
        if component == "fleet" or component.startswith(("job:", "policy:")):
            return [component]
        if component in self.racks:
            return [component, "fleet"]
        node = node_of(component, self.racks) or component
        out = [component] if component == node else [component, node]
        rack = self.rack_of.get(node)
        return [*out, *([rack] if rack else []), "fleet"]

    def holds(self, outer: str, inner: str) -> bool:
        """`outer` is `inner` or holds it."""
        return outer in self.chain(inner)

    def ranks_of(self, job: str) -> list[Rank]:
        return [r for r in self.ranks if r.job == job]


@dataclass(frozen=True)
class OpenIncident:
    incident_id: str
    severity: str
    title: str
    opened_ts_s: float
    parts: tuple[str, ...]  # its components and its top hypothesis' component
    cause: str  # "thermal_throttle on node4/gpu1 (0.86)", or "" before a diagnosis
    impact: str = ""
    slowdown_pct: float = 0.0
    gpus: int = 0
    node: str = ""  # "" for this workspace's own; else the node agent that opened it
    covered_by: str = ""  # the incident of this workspace that covers this node agent's incident

    def sort_key(self) -> tuple[int, float, int, float, str]:
        return (
            SEVERITY_ORDER.get(self.severity, 1),
            -self.slowdown_pct,
            -self.gpus,
            -self.opened_ts_s,
            self.incident_id,
        )

    def label(self) -> str:
        """`INC-fleet-0001 (critical)`, a node agent's `INC-node4-0002 (warning, node4's own)`."""
        whose = f", {self.node}'s own" if self.node else ""
        return f"{self.incident_id} ({self.severity}{whose})"


def has_table(store: Store, table: str, column: str | None = None) -> bool:
    """Whether the workspace has `table` (and its `column`): one from before a migration has not."""
    if column is None:
        return bool(
            store.query(
                "SELECT 1 FROM information_schema.tables WHERE table_name = ? AND table_catalog = current_database()",
                [table],
            )
        )
    return bool(
        store.query(
            "SELECT 1 FROM information_schema.columns WHERE table_name = ? AND column_name = ?"
            " AND table_catalog = current_database()",
            [table, column],
        )
    )


def as_open(d: Diagnosis) -> OpenIncident:
    """A diagnosis as these answers list it (its parts, its top cause, the impact that ranks it)."""
    i = d.incident
    top = d.hypotheses[0] if d.hypotheses else None
    weight = impact(i.symptoms, SeverityConfig())
    parts = [*i.components, *([top.component] if top and top.component else [])]
    return OpenIncident(
        i.incident_id,
        i.severity,
        i.title,
        i.opened_ts_s,
        tuple(dict.fromkeys(parts)),
        f"{top.root_cause} on {top.component} ({top.confidence:.2f})" if top else _condition(i),
        i.impact,
        weight.slowdown_pct or 0.0,
        weight.gpus,
    )


def _condition(incident: Incident) -> str:
    """What a condition incident (aiops/store/conditions.py) is, for its line: no cause is to be found."""
    kind = condition_of(incident)
    return f"{kind}: the product's own sight, not a fault (no cause to diagnose)" if kind else ""


def open_incidents(
    store: Store, diagnoses: Iterable[Diagnosis], horizon_ts_s: float | None
) -> list[OpenIncident]:
    """Every incident open at the horizon (the newest telemetry), ranked: this workspace's (not resolved by
    then) and the node agents' the fleet read in its newest minute (each once: a node incident the fleet
    covers is listed after the fleet's, saying so)."""
    own = sorted(
        (
            as_open(d)
            for d in diagnoses
            if d.incident.resolved_ts_s is None
            or (horizon_ts_s is not None and d.incident.resolved_ts_s > horizon_ts_s)
        ),
        key=OpenIncident.sort_key,
    )
    nodes = sorted(_node_incidents(store, horizon_ts_s), key=OpenIncident.sort_key)
    covered = {i.covered_by for i in nodes if i.covered_by}
    out: list[OpenIncident] = []
    for incident in own:
        out.append(incident)
        if incident.incident_id in covered:
            out.extend(n for n in nodes if n.covered_by == incident.incident_id)
    out.extend(n for n in nodes if not n.covered_by or n.covered_by not in {i.incident_id for i in own})
    return out


NODE_INCIDENTS_SQL = (
    "SELECT s.node, s.incident_id, arg_max(s.component, s.ts_s) AS component, "
    "arg_max(s.root_cause, s.ts_s) AS root_cause, arg_max(s.severity, s.ts_s) AS severity, "
    "min(s.ts_s) AS first_seen_ts_s, any_value(p.covered_by) AS covered_by "
    "FROM node_incident_samples s LEFT JOIN incident_pages p ON p.node = s.node AND p.incident_id = s.incident_id "
    "WHERE s.ts_s >= ? AND s.ts_s <= ? GROUP BY s.node, s.incident_id ORDER BY s.node, s.incident_id"
)


def _node_incidents(store: Store, horizon_ts_s: float | None) -> list[OpenIncident]:
    if horizon_ts_s is None:
        return []
    rows = store.query(NODE_INCIDENTS_SQL, [horizon_ts_s - NODE_OPEN_S, horizon_ts_s])
    out = []
    for r in rows:
        component, node = str(r["component"] or ""), str(r["node"])
        cause = f"{r['root_cause']} on {component}" if r["root_cause"] else ""
        out.append(
            OpenIncident(
                str(r["incident_id"]),
                str(r["severity"]),
                f"{cause or 'undiagnosed'} (from {node}'s agent)",
                float(r["first_seen_ts_s"]),
                tuple(dict.fromkeys(p for p in (component, node) if p)),
                cause,
                node=node,
                covered_by=str(r["covered_by"] or ""),
            )
        )
    return out


def touching(
    places: Places, component: str, incidents: Iterable[OpenIncident]
) -> list[tuple[OpenIncident, str]]:
    """The incidents that touch `component`, each with how ("on node4/gpu1", "on rack1, which holds it")."""
    out = []
    for incident in incidents:
        how = _how(places, component, incident.parts)
        if how is not None:
            out.append((incident, how))
    return out


def _how(places: Places, component: str, parts: tuple[str, ...]) -> str | None:
    if component.startswith("job:"):
        if component in parts:
            return "on the job itself"
        mine = places.ranks_of(component[4:])
        hit = [p for p in parts if not p.startswith("job:") and any(_carries(places, p, r) for r in mine)]
        return f"on {', '.join(hit[:3])}, where its ranks run" if hit else None
    for part in parts:
        if part == component:
            return "on it"
    inside = [p for p in parts if not p.startswith("job:") and places.holds(component, p)]
    if inside:
        return f"on {', '.join(inside[:3])}" + (f" (+{len(inside) - 3})" if len(inside) > 3 else "")
    around = [p for p in parts if not p.startswith("job:") and places.holds(p, component)]
    if around:
        return f"on {around[0]}, which holds it"
    return None


def _carries(places: Places, part: str, rank: Rank) -> bool:
    """`part` holds the rank's GPU (the GPU, its node, rack or the fleet), or is the GPU's part or the NIC the
    rank's collectives cross."""
    return (
        places.holds(part, rank.gpu) or places.holds(rank.gpu, part) or (bool(rank.nic) and part == rank.nic)
    )


@dataclass
class JobReach:
    """An open incident's reach into one job: the ranks on what it is about (none: it names the job itself)."""

    incident: OpenIncident
    ranks: list[Rank]


def reach(places: Places, job: str, incidents: Iterable[OpenIncident]) -> list[JobReach]:
    """The open incidents that touch `job`, each with the job's ranks on the GPUs or nodes it is about."""
    out = []
    mine = places.ranks_of(job)
    for incident in incidents:
        hardware = [p for p in incident.parts if not p.startswith("job:")]
        hit = [r for r in mine if any(_carries(places, p, r) for p in hardware)]
        if hit or f"job:{job}" in incident.parts:
            out.append(JobReach(incident, hit))
    return out


def ranks_text(ranks: list[Rank], limit: int = 8) -> str:
    """`rank 5 on node4/gpu1, rank 6 on node4/gpu2` (then `+N more`)."""
    shown = ", ".join(f"rank {r.rank} on {r.gpu}" for r in ranks[:limit])
    return shown + (f" (+{len(ranks) - limit} more)" if len(ranks) > limit else "")
