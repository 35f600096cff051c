"""Generate a randomised scenario suite (other seeds, targets, severities, shapes, decoys) to check that the
analyst generalises beyond the public suite: `python -m evals.generate --out DIR [--count N] [--seed S]
[--two-faults M]`. With `--two-faults M` the suite also holds M cases with two independent faults: other racks,
onsets at least 100 s apart, the second often a 60-200 s transient inside the first's long incident, with
checkpoint traffic and idle nodes as decoys (issue 14, item 1). About 30 % of the cases run on a lossless (PFC)
RoCE fabric (`fabric: lossless`), always every second healthy run and every second `ecn_misconfig` case; every
second `nic_link_flap` of a kind has severity 0.9 or more (outages past the IB transport retry window: NCCL error
12, the job restarts). The same seed writes the same files."""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import yaml

from aiops.labels import (
    BENIGN_LABELS,
    FAULT_KINDS,
    LONG_OUTAGE_CASES,
    LOSSLESS_CASES,
    NEEDS_LANES,
    STALLS_JOB,
    TARGET_KINDS,
)
from aiops.scenarios import DEFAULT_RULE_IDS, parse_scenario

SHAPES = (
    {"racks": 2, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 2},
    {"racks": 1, "nodes_per_rack": 4, "gpus_per_node": 8, "nics_per_node": 1},
    {"racks": 3, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2},
    {"racks": 2, "nodes_per_rack": 3, "gpus_per_node": 8, "nics_per_node": 2},
)


def _target(rng: random.Random, kind: str, shape: dict[str, int]) -> str:
    nodes = shape["racks"] * shape["nodes_per_rack"]
    choice = rng.choice(TARGET_KINDS[kind])
    node = rng.randrange(nodes)
    return {
        "gpu": f"node{node}/gpu{rng.randrange(shape['gpus_per_node'])}",
        "node": f"node{node}",
        "nic": f"node{node}/nic{rng.randrange(shape['nics_per_node'])}",
        "rack": f"rack{rng.randrange(shape['racks'])}",
        "fleet": "fleet",
        "policy": f"policy:{rng.choice([*DEFAULT_RULE_IDS[:-1], 'stray-rule'])}",
    }[choice]


LOSSLESS_SHARE = 0.3  # of the cases on a lossless (PFC) RoCE fabric (scenario `fabric: lossless`)
RETRIES_EXHAUSTED_SEVERITY = 0.9  # a link flap from here on outlasts the IB transport retry window


def _fabric(rng: random.Random, kind: str | None, nth: int) -> str:
    """Lossless in a share of the cases, and always for every second healthy run and case of a label whose spec
    says `lossless_cases` (ECN off: so a suite with two cases per kind holds a healthy lossless run and ECN off
    on a lossless fabric)."""
    drawn = rng.random() < LOSSLESS_SHARE
    if (kind is None or kind in LOSSLESS_CASES) and nth % 2 == 1:
        return "lossless"
    return "lossless" if drawn else "lossy"


def _severity(rng: random.Random, kind: str | None, nth: int, low: float) -> float:
    """U(low, 1.0); every second case of a label whose spec says `long_outage_cases` (a link flap) draws from
    [0.9, 1.0]: outages beyond the IB transport retry window (NCCL error 12, the job restarts)."""
    if kind in LONG_OUTAGE_CASES and nth % 2 == 1:
        return round(rng.uniform(RETRIES_EXHAUSTED_SEVERITY, 1.0), 2)
    return round(rng.uniform(low, 1.0), 2)


def scenario(rng: random.Random, kind: str | None, nth: int = 0) -> dict[str, Any]:
    """The nth case of its kind (None: healthy), named by its kind and nth."""
    shape = dict(rng.choice(SHAPES))
    nodes = shape["racks"] * shape["nodes_per_rack"]
    duration = rng.choice([480, 600, 720])
    jobs: list[dict[str, Any]] = []
    if rng.random() < 0.3 and nodes >= 4:
        split = rng.randrange(2, nodes - 1)
        jobs.append(
            {
                "name": "big",
                "nodes": [f"node{n}" for n in range(split)],
                "step_compute_s": 1.2,
                "checkpoint_every_s": rng.choice([60, 120, 180]),
                "checkpoint_gb": rng.choice([20, 60]),
            }
        )
        jobs.append(
            {
                "name": "small",
                "nodes": [f"node{n}" for n in range(split, nodes - 1)],
                "step_compute_s": 0.7,
                "allreduce_mb": 128,
            }
        )
    else:
        job: dict[str, Any] = {
            "name": "train",
            "nodes": "all",
            "step_compute_s": rng.choice([0.8, 1.0, 1.5]),
            "allreduce_mb": rng.choice([128, 256, 512]),
        }
        if rng.random() < 0.6:
            job.update(checkpoint_every_s=rng.choice([60, 90, 150]), checkpoint_gb=rng.choice([10, 40, 80]))
        jobs.append(job)
    faults = []
    if kind is not None:
        start = rng.randrange(90, duration // 2)
        faults.append(
            {
                "kind": kind,
                "target": _target(rng, kind, shape),
                "start_s": start,
                "severity": _severity(rng, kind, nth, 0.25),
            }
        )
    doc: dict[str, Any] = {
        "name": f"gen-{kind or 'healthy'}-{nth:02d}".replace("_", "-"),
        "seed": rng.randrange(10_000),
        "duration_s": duration,
        "cluster": shape,
        "fabric": _fabric(rng, kind, nth),
        "jobs": jobs,
        "lanes": "enabled" if rng.random() < 0.85 else "disabled",
        "faults": faults,
    }
    if kind in NEEDS_LANES:
        doc["lanes"] = "enabled"
    return doc


def _usable(doc: dict[str, Any]) -> bool:
    """The fault's target must be busy where the fault only shows under load (a job on it)."""
    if not doc["faults"]:
        return True
    target = doc["faults"][0]["target"]
    if any(job["nodes"] == "all" for job in doc["jobs"]):
        return True
    busy = {n for job in doc["jobs"] for n in job["nodes"]}
    nodes = doc["cluster"]["racks"] * doc["cluster"]["nodes_per_rack"]
    idle_nodes = {f"node{n}" for n in range(nodes)} - busy
    return target.split("/")[0] not in idle_nodes


# Kinds a second, independent fault may have: targets below the fleet, on one rack's side of the cluster.
# (A lane policy or a fleet-wide condition reaches every node: it cannot be independent of anything; a benign
# condition is no fault.)
PAIR_KINDS = tuple(
    k for k in FAULT_KINDS if k not in BENIGN_LABELS and set(TARGET_KINDS[k]) - {"fleet", "policy"}
)
STALLING = STALLS_JOB  # the job stops: its peers see no traffic


def _pair_target(rng: random.Random, kind: str, shape: dict[str, int], rack: int, nodes: list[int]) -> str:
    choice = rng.choice([c for c in TARGET_KINDS[kind] if c not in ("fleet", "policy")])
    node = rng.choice(nodes)
    return {
        "gpu": f"node{node}/gpu{rng.randrange(shape['gpus_per_node'])}",
        "node": f"node{node}",
        "nic": f"node{node}/nic{rng.randrange(shape['nics_per_node'])}",
        "rack": f"rack{rack}",
    }[choice]


def two_fault_scenario(rng: random.Random, index: int) -> dict[str, Any]:
    """Two independent faults on two racks, the second starting 100 s or more after the first."""
    shape = dict(rng.choice([s for s in SHAPES if s["racks"] >= 2]))
    per_rack = shape["nodes_per_rack"]
    racks = rng.sample(range(shape["racks"]), 2)
    sides = [[r * per_rack + n for n in range(per_rack)] for r in racks]
    first_kind, second_kind = rng.choice(PAIR_KINDS), rng.choice(PAIR_KINDS)
    duration = rng.choice([600, 700, 800])
    checkpoints = {"checkpoint_every_s": rng.choice([60, 120]), "checkpoint_gb": rng.choice([20, 40])}
    if (
        first_kind in STALLING or rng.random() < 0.3
    ):  # one job per side: a stalled job leaves the other running
        jobs: list[dict[str, Any]] = [
            {
                "name": f"job{i}",
                "nodes": [f"node{n}" for n in side],
                "step_compute_s": rng.choice([0.8, 1.0, 1.2]),
            }
            for i, side in enumerate(sides)
        ]
    else:
        jobs = [{"name": "train", "nodes": "all", "step_compute_s": rng.choice([0.8, 1.0, 1.5])}]
    if rng.random() < 0.5:
        jobs[-1].update(checkpoints)  # decoy: bulk bursts in their own lane
    first_start = rng.randrange(90, 200)
    second_start = rng.randrange(first_start + 100, duration - 220)
    faults = [
        {
            "kind": first_kind,
            "target": _pair_target(rng, first_kind, shape, racks[0], sides[0]),
            "start_s": first_start,
            "severity": _severity(rng, first_kind, index, 0.5),
        },
        {
            "kind": second_kind,
            "target": _pair_target(rng, second_kind, shape, racks[1], sides[1]),
            "start_s": second_start,
            "severity": _severity(rng, second_kind, index + 1, 0.5),
        },
    ]
    if rng.random() < 0.5:
        faults[1]["duration_s"] = rng.randrange(60, 201)  # a transient inside the first fault's incident
    return {
        "name": f"gen-two-{index:03d}-{first_kind}-{second_kind}".replace("_", "-"),
        "seed": rng.randrange(10_000),
        "duration_s": duration,
        "cluster": shape,
        "fabric": "lossless" if rng.random() < LOSSLESS_SHARE else "lossy",
        "jobs": jobs,
        "lanes": "enabled",
        "faults": faults,
        "expect": [{"root_cause": f["kind"], "component": f["target"]} for f in faults],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=2, help="scenarios per label")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--two-faults", type=int, default=0, help="two-fault scenarios to add")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for kind in [*FAULT_KINDS, None]:
        rng = _rng(args.seed, kind or "healthy")
        made = 0
        while made < args.count:
            doc = scenario(rng, kind, made)
            if not _usable(doc):
                continue
            parse_scenario(doc)
            (out / f"{doc['name']}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
            made += 1
    for nth in range(args.two_faults):
        doc = two_fault_scenario(_rng(args.seed, f"two-faults-{nth}"), nth)
        parse_scenario(doc)
        (out / f"{doc['name']}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))


def _rng(seed: int, key: str) -> random.Random:
    """The draws of one label's cases (or one two-fault case), keyed by the seed and the label, not by the
    label's position among the others: a new label adds its cases and changes no other case."""
    return random.Random(f"{seed}:{key}")  # a str seed is hashed with SHA-512: the same on every run


if __name__ == "__main__":
    main()
