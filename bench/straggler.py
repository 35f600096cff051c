"""How fast the analyst names a straggler from per-rank timing: the slow rank, its node and the class of its cause.

Faults that make ranks late or collectives slow are injected on the twin (one job of 64 ranks on 8 nodes: 2 racks
x 4 nodes x 8 GPUs, 2 NICs a node; random target, start, severity and seed per case), the twin's per-rank timing
(aiops/sim/rank_timing.py: what the rank-timing uprobes record, a 2 s window every 5 s) is stored with the rest of
its telemetry, and the product's own detection (aiops/detect/stragglers.py) and RCA read the workspace.

- **Onset** is read from the twin as it runs, never from telemetry: the first second after the fault's start at
  which the slow ranks reach the step's collectives 5 % of the step later than the median of the others (a GPU or a
  node target), or the job's step is 5 % longer than before the fault (a NIC target: collectives slow for every
  rank). A case whose fault never gets there (too mild) is counted as `below_threshold` and not timed.
- **Named** is the time of the first `rank_straggler` / `network_straggler` symptom that names a slow rank (the
  target GPU's rank, a rank of the target node, a rank behind the target NIC), the target's node, and the
  expected class (thermal, power cap, brake: compute; PCIe: host; data loader: input; NIC faults: network).
  `rank_s`, `node_s`, `class_s` are timed separately (each the first symptom naming that much right), `all_s`
  needs all three in one symptom. Times are from onset to the end of the detection window that reported it.
- **Cited**: whether that symptom's incident's diagnosis cites it as evidence of a hypothesis (aiops/rca/
  stragglers.py), with the hypothesis' label.
- **Wrong ranks**: on healthy jobs (several shapes and seeds, checkpoints, two jobs, no lanes), every rank any
  straggler symptom names (must be 0); in the fault runs, ranks named that are not slow (before or after onset).

`--via prometheus --step 15s` reads each case through the fleet path instead: every node agent's exports (each
its own ranks) scraped into a real Prometheus (promtool backfill), the fleet joining the ranks of all nodes.

`--spread` scrapes each node agent at its own offset in the step (Prometheus spreads its targets by a hash of
their labels) instead of all at one time; `--rank-reads N` has the fleet read rank timing N times a step.

    .venv/bin/python bench/straggler.py [--seeds 3] [--healthy 4] [--via twin|prometheus] [--step 15s]
        [--spread] [--rank-reads 3] [--phase-s S]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from aiops.config import FleetConfig
from aiops.detect import detect
from aiops.fleet.history import REPLAYED, spread_offsets
from aiops.models import Diagnosis, Symptom
from aiops.rca import diagnose
from aiops.scenarios import Scenario, parse_scenario
from aiops.sim import World, simulate
from aiops.store import Store

CLUSTER = {"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2}
JOB = {"name": "train", "nodes": "all", "step_compute_s": 1.0, "allreduce_mb": 256}
# fault kind -> (the class rank timing should give, the target's kind)
KINDS: dict[str, tuple[str, str]] = {
    "thermal_throttle": ("compute", "gpu"),
    "power_cap_misconfig": ("compute", "gpu"),
    "power_brake": ("compute", "node"),
    "pcie_degraded": ("host", "gpu"),
    "input_pipeline_bottleneck": ("input", "node"),
    "bulk_traffic_contention": ("network", "nic"),
    "ecn_misconfig": ("network", "nic"),
    "lane_misclassification": ("network", "nic"),
}
# Not here: a link flap stops the job's steps rather than slowing them (no call completes while the link is down,
# so rank timing records nothing new); carrier_flap names the NIC at its first window.
ONSET_SHARE = (
    0.05  # of the step: the slow ranks arrive this much later, or the job's step is this much longer
)
AFTER_ONSET_S = 150.0  # how long each case runs after its fault's start
KINDS_NAMED = ("rank_straggler", "network_straggler")


@dataclass
class Case:
    kind: str
    target: str
    seed: int
    start_s: float
    severity: float

    @property
    def scenario(self) -> Scenario:
        fault = {"kind": self.kind, "target": self.target, "start_s": self.start_s, "severity": self.severity}
        return parse_scenario(
            {
                "name": f"straggler-{self.kind.replace('_', '-')}-{self.seed}",
                "seed": self.seed,
                "duration_s": self.start_s + AFTER_ONSET_S,
                "cluster": CLUSTER,
                "jobs": [{**JOB, "checkpoint_every_s": 120, "checkpoint_gb": 40}],
                "faults": [fault],
            }
        )


class TruthWorld(World):
    """The twin, remembering per second how late the target's ranks were and the job's step (the truth the
    bench times against: never stored, never seen by the analyst)."""

    def __init__(self, scenario: Scenario, target: str) -> None:
        super().__init__(scenario)
        lay = self.layout
        self.target = target
        gpus = lay.jobs[0].gpus
        if target in lay.nic_index:
            self.slow = gpus[lay.gpu_nic[gpus] == lay.nic_index[target]]
        elif "/" in target:
            self.slow = np.array([lay.gpu_index[target]])
        else:
            self.slow = gpus[lay.gpu_node[gpus] == lay.node_names.index(target)]
        self.others = np.setdiff1d(gpus, self.slow)
        self.late: list[tuple[float, float, float]] = []  # (ts_s, late share of the step, step time)

    def step(self, dt_s: float = 1.0) -> None:
        super().step(dt_s)
        step_s = float(self.step_time_s[0])
        if self.rank_step_s[self.slow].max() <= 0:
            self.late.append((self.now_ts_s, math.nan, math.nan))
            return
        ready = self.rank_ready_s
        late = (float(np.median(ready[self.slow])) - float(np.median(ready[self.others]))) / step_s
        self.late.append((self.now_ts_s, late, step_s))

    def onset(self, start_ts_s: float, network: bool) -> float | None:
        before = [s for t, _, s in self.late if t < start_ts_s and not math.isnan(s)]
        reference_s = statistics.median(before) if before else math.nan
        for t, late, step_s in self.late:
            if t < start_ts_s or math.isnan(step_s):
                continue
            held = step_s / reference_s - 1.0 if network else late
            if held >= ONSET_SHARE:
                return t
        return None

    def slow_ranks(self) -> set[int]:
        gpus = self.layout.jobs[0].gpus.tolist()
        return {gpus.index(g) for g in self.slow.tolist()}


def cases(seeds: int, rng: random.Random) -> list[Case]:
    out: list[Case] = []
    nodes, gpus, nics = 8, 8, 2
    for kind, (_, target_kind) in KINDS.items():
        for _ in range(seeds):
            node = rng.randrange(nodes)
            target = {
                "gpu": f"node{node}/gpu{rng.randrange(gpus)}",
                "node": f"node{node}",
                "nic": f"node{node}/nic{rng.randrange(nics)}",
            }[target_kind]
            start = float(rng.randrange(150, 260))
            out.append(Case(kind, target, rng.randrange(1, 10_000), start, round(rng.uniform(0.5, 1.0), 2)))
    return out


PHASE_S: float | None = None  # --phase-s: where the fleet reads in a step (None: learned, after the scrapes)
SPREAD = False  # --spread: each node agent scraped at its own offset in the step
RANK_READS = 3  # --rank-reads: the fleet's rank timing read this many times a step


def fleet_store(twin: Store, step_s: float, work: Path) -> Store:
    """The run through the fleet path: each node agent's exports, a real Prometheus, the fleet's ingest."""
    from evals.harness import through_prometheus

    return through_prometheus(twin, step_s, work, PHASE_S, spread=SPREAD, rank_reads=RANK_READS)[0]


@dataclass
class Found:
    symptoms: list[Symptom] = field(default_factory=list)
    diagnoses: list[Diagnosis] = field(default_factory=list)


def analyse(store: Store) -> Found:
    incidents = detect(store)
    found = Found(diagnoses=diagnose(store, incidents))
    for incident in incidents:
        found.symptoms += [s for s in incident.symptoms if s.kind in KINDS_NAMED]
    return found


def named_ranks(s: Symptom) -> set[int]:
    return {int(r) for r in s.detail.get("ranks") or [] if isinstance(r, int)}


def stages(twin: Store, fleet: Store | None, node: str, onset: float | None, step_s: float) -> dict[str, Any]:
    """Where the time from onset to a name goes, each stage's end in seconds after onset: `window_s`, the close
    of the first rank-timing window holding seconds after the onset (what the node agent exports next); with the
    fleet path `scrape_s`, the target node's first scrape at or after it (its offset with `--spread`), and
    `read_s`, the fleet's first rank row of that node at or after the scrape (its read grid). The rest, up to the
    name, is the rules' (a first row that holds seconds before the onset too shows only part of the gap)."""
    if onset is None:
        return {}
    close = twin.scalar(
        "SELECT min(ts_s) FROM rank_timing_samples WHERE node = ? AND ts_s > ?", [node, onset]
    )
    if close is None:
        return {}
    out: dict[str, Any] = {"window_s": round(float(close) - onset, 1)}
    if fleet is None:
        return out
    first_s = min(float(twin.scalar(f"SELECT min(ts_s) FROM {t}") or math.inf) for t in REPLAYED)
    nodes = [str(r["node"]) for r in twin.query("SELECT node FROM topology WHERE kind = 'node' ORDER BY 1")]
    offset_s = spread_offsets(nodes, step_s).get(node, 0.0) if SPREAD else 0.0
    k = math.ceil((float(close) - first_s - step_s - offset_s) / step_s - 1e-9)
    scrape = first_s + step_s + offset_s + max(k, 0) * step_s
    out["scrape_s"] = round(scrape - onset, 1)
    read = fleet.scalar(
        "SELECT min(ts_s) FROM rank_timing_samples WHERE node = ? AND ts_s >= ?", [node, scrape - 1e-6]
    )
    out["read_s"] = None if read is None else round(float(read) - onset, 1)
    return out


def run_case(case: Case, via: str, step_s: float) -> dict[str, Any]:
    scenario = case.scenario
    world = TruthWorld(scenario, case.target)
    expected_class = KINDS[case.kind][0]
    start_ts_s = world.epoch_ts_s + case.start_s
    slow, node = world.slow_ranks(), case.target.split("/")[0]
    with Store(":memory:") as twin:
        simulate(scenario, twin, world=world, flush_every_s=math.inf)
        onset = world.onset(start_ts_s, network=expected_class == "network")
        if via == "prometheus":
            with tempfile.TemporaryDirectory(prefix="aiops-bench-straggler-") as tmp:
                store = fleet_store(twin, step_s, Path(tmp))
        else:
            store = twin
        found = analyse(store)
        timing = stages(twin, None if store is twin else store, node, onset, step_s)
        if store is not twin:
            store.close()
    firsts: dict[str, float | None] = dict.fromkeys(("rank_s", "node_s", "class_s", "all_s"))
    wrong: set[int] = set()
    cited: str | None = None
    for s in sorted(found.symptoms, key=lambda s: s.ts_s):
        ranks = named_ranks(s)
        wrong |= ranks - slow
        if onset is None:
            continue
        hits = {
            "rank_s": bool(ranks & slow),
            "node_s": s.detail.get("node") == node,
            "class_s": s.detail.get("cause") == expected_class,
        }
        hits["all_s"] = all(hits.values())
        for key, hit in hits.items():
            if hit and firsts[key] is None:
                firsts[key] = round(s.ts_s - onset, 1)
        if hits["all_s"] and cited is None:
            cited = _cited_by(found.diagnoses, s)
    return {
        "kind": case.kind,
        "target": case.target,
        "seed": case.seed,
        "severity": case.severity,
        "class": expected_class,
        "onset_after_start_s": None if onset is None else round(onset - start_ts_s, 1),
        **firsts,
        "cited_by": cited,
        "wrong_ranks": sorted(wrong),
        "stages": timing,
    }


def _cited_by(diagnoses: list[Diagnosis], s: Symptom) -> str:
    """The label of the first hypothesis of the symptom's incident that cites rank timing, or ''."""
    for d in diagnoses:
        if s not in d.incident.symptoms and not any(
            x.kind == s.kind and x.component == s.component for x in d.incident.symptoms
        ):
            continue
        for h in d.hypotheses:
            if any("rank timing" in e.claim or "stands out among its NICs" in e.claim for e in h.evidence):
                return f"{h.root_cause} {h.component}"
    return ""


HEALTHY_SHAPES: tuple[dict[str, Any], ...] = (
    {"cluster": CLUSTER, "jobs": [{**JOB, "checkpoint_every_s": 120, "checkpoint_gb": 40}]},
    {
        "cluster": CLUSTER,
        "lanes": "disabled",
        "jobs": [{**JOB, "checkpoint_every_s": 60, "checkpoint_gb": 80}],
    },
    {
        "cluster": {**CLUSTER, "racks": 1},
        "jobs": [
            {"name": "a", "nodes": ["node0", "node1"], "step_compute_s": 0.6, "allreduce_mb": 128},
            {"name": "b", "nodes": ["node2", "node3"], "step_compute_s": 2.0, "allreduce_mb": 512},
        ],
    },
    {"cluster": CLUSTER, "fabric": "lossless", "jobs": [{**JOB, "step_compute_s": 0.4}]},
)


def run_healthy(index: int, seed: int, duration_s: float, via: str, step_s: float) -> dict[str, Any]:
    shape = HEALTHY_SHAPES[index % len(HEALTHY_SHAPES)]
    scenario = parse_scenario({"name": f"healthy-{index}", "seed": seed, "duration_s": duration_s, **shape})
    with Store(":memory:") as twin:
        simulate(scenario, twin, flush_every_s=math.inf)
        rank_jobs = int(twin.scalar("SELECT count(DISTINCT job || rank) FROM rank_timing_samples") or 0)
        if via == "prometheus":
            with (
                tempfile.TemporaryDirectory(prefix="aiops-bench-straggler-") as tmp,
                fleet_store(twin, step_s, Path(tmp)) as fleet,
            ):
                symptoms = analyse(fleet).symptoms
        else:
            symptoms = analyse(twin).symptoms
    wrong = {(str(s.detail.get("job")), r) for s in symptoms for r in named_ranks(s)}
    return {"shape": index % len(HEALTHY_SHAPES), "seed": seed, "ranks": rank_jobs, "wrong_ranks": len(wrong)}


def _pct(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`, a case never named counting as infinitely late (None then)."""
    if not values:
        return None
    ordered = sorted(values)
    value = ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]
    return None if math.isinf(value) else round(value, 1)


def _times(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    values = [math.inf if r[key] is None else float(r[key]) for r in runs]
    named = sum(1 for v in values if not math.isinf(v))
    return {"p50": _pct(values, 0.5), "p90": _pct(values, 0.9), "named": named, "missed": len(values) - named}


def _stages(timed: list[dict[str, Any]]) -> dict[str, Any]:
    """p50 / p90 of each stage's length (`stages`): onset to the first window's close, that to the node's next
    scrape, the scrape to the fleet's read, and the read (or the window, on the node path) to the name."""
    ends = ("window_s", "scrape_s", "read_s", "all_s")
    spans: dict[str, list[float]] = {}
    for r in timed:
        at = {**r["stages"], "all_s": r["all_s"]}
        before = 0.0
        for end in ends:
            if at.get(end) is None:
                continue
            spans.setdefault(f"to_{end.removesuffix('_s')}", []).append(float(at[end]) - before)
            before = float(at[end])
    return {k: {"p50": _pct(v, 0.5), "p90": _pct(v, 0.9)} for k, v in spans.items()}


def summarize(runs: list[dict[str, Any]], healthy: list[dict[str, Any]]) -> dict[str, Any]:
    timed = [r for r in runs if r["onset_after_start_s"] is not None]
    out: dict[str, Any] = {"cases": len(runs), "timed": len(timed), "below_threshold": len(runs) - len(timed)}
    for key in ("rank_s", "node_s", "class_s", "all_s"):
        out[key] = _times(timed, key)
    out["named_within_20s"] = sum(1 for r in timed if r["all_s"] is not None and r["all_s"] <= 20.0)
    out["cited_in_diagnosis"] = sum(1 for r in timed if r["cited_by"])
    out["by_class"] = {
        cls: _times([r for r in timed if r["class"] == cls], "all_s")
        for cls in sorted({r["class"] for r in runs})
    }
    out["stages"] = _stages(timed)
    out["wrong_ranks_in_fault_runs"] = sum(len(r["wrong_ranks"]) for r in runs)
    out["healthy_runs"] = len(healthy)
    out["healthy_job_ranks"] = sum(h["ranks"] for h in healthy)
    out["wrong_ranks_healthy"] = sum(h["wrong_ranks"] for h in healthy)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="cases per fault kind")
    parser.add_argument("--healthy", type=int, default=4, help="healthy runs (one per shape, cycling)")
    parser.add_argument("--healthy-duration-s", type=float, default=900.0)
    parser.add_argument("--via", choices=("twin", "prometheus"), default="twin")
    parser.add_argument("--step", default="15s", help="scrape interval with --via prometheus (e.g. 15s)")
    parser.add_argument("--rng", type=int, default=40, help="seed of the case generator")
    parser.add_argument(
        "--cases",
        default="",
        help="only these cases, by their index in the run (e.g. 0,2,16): a rerun of a few",
    )
    parser.add_argument(
        "--phase-s",
        type=float,
        default=None,
        help="with --via prometheus: read at multiples of the step plus this (default: learned, a second after "
        "the scrapes; 0 reads 14 s after them here, the worst phase)",
    )
    parser.add_argument(
        "--spread",
        action="store_true",
        help="with --via prometheus: scrape each node agent at its own offset in the step (a hash of its name, "
        "as Prometheus spreads its targets) instead of all at one time",
    )
    parser.add_argument(
        "--rank-reads",
        type=int,
        default=FleetConfig().rank_reads,
        help="with --via prometheus: the fleet reads rank timing this many times a step ([fleet] rank_reads)",
    )
    args = parser.parse_args()
    global PHASE_S, SPREAD, RANK_READS
    PHASE_S, SPREAD, RANK_READS = args.phase_s, args.spread, args.rank_reads
    step_s = float(args.step.removesuffix("s"))
    rng = random.Random(args.rng)
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    only = {int(x) for x in args.cases.split(",") if x.strip()}
    for i, case in enumerate(cases(args.seeds, rng)):
        if only and i not in only:
            continue
        runs.append(run_case(case, args.via, step_s))
        print(f"[{i + 1}] {json.dumps(runs[-1])}", file=sys.stderr)
    healthy = [
        run_healthy(i, rng.randrange(1, 10_000), args.healthy_duration_s, args.via, step_s)
        for i in range(args.healthy)
    ]
    result = {
        "via": args.via,
        "step_s": step_s if args.via == "prometheus" else None,
        "phase_s": args.phase_s if args.via == "prometheus" else None,
        "spread": args.spread if args.via == "prometheus" else None,
        "rank_reads": args.rank_reads if args.via == "prometheus" else None,
        "rank_timing": {"period_s": 5.0, "window_s": 2.0},
        "summary": summarize(runs, healthy),
        "cases": runs,
        "healthy": healthy,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
