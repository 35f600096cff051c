"""Filing one plan step over N GPUs (a site power cap's step: one `set_power_limit` proposal a GPU, 5,120 a shard at
40,960 GPUs in 8 shards, docs/BENCHMARKS.md round eleven): CPU and wall time of `file_plan` with that one step, and
the witness's fsyncs (`os.fsync` calls of this process, counted by wrapping it here) and writes, on a fresh
workspace file in a temporary folder. Each target files two audit entries (`proposal`, `validation`); the step
adds the plan's `filed` and `proposed`.

The validation context is given (every GPU at its default limit, no history), as tests/test_plans.py gives it: what
is timed is validating, filing and auditing the step, not reading telemetry. Prints one JSON object a size:
{"targets": N, "cpu_s": ..., "wall_s": ..., "os_fsyncs": ..., "witness_lines": ..., "audit_rows": ...}.

    .venv/bin/python bench/plan_step_audit.py [--targets 1000 5000]

DuckDB's own syncs (its WAL at each commit) are not `os.fsync` calls; count them from outside, e.g.
`strace -f -c -e trace=fsync,fdatasync .venv/bin/python bench/plan_step_audit.py --targets 1000`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from aiops.models import GpuPower, Hypothesis, Incident
from aiops.plans import StepDraft, file_plan
from aiops.store import Store
from guardrails.actions import Action
from guardrails.audit import read_rows
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.topology import Topology

TDP_W = 700.0
NOW_TS_S = 1_800_000_000.0


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _step(targets: list[str]) -> StepDraft:
    actions = [
        Action(
            proposal_id="draft",
            kind="set_power_limit",
            target=gpu,
            parameters={"power_limit_w": 560.0},
            proposed_by="analyst",
            created_ts_s=0,
        )
        for gpu in targets
    ]
    return StepDraft(
        1, "limit", "site cap", "physical", actions, "effect", "cost", "rollback", 60.0, "x", "why"
    )


def file_one_step(folder: Path, count: int) -> dict[str, Any]:
    nodes = -(-count // 8)
    topology = Topology.grid(-(-nodes // 80), 80, 8, 1)
    gpus = {
        g: GpuPower(g, TDP_W, 200.0, TDP_W, TDP_W, draw_w=600.0)
        for n in topology.node_gpus.values()
        for g in n
    }
    targets = sorted(gpus)[:count]
    store = Store(folder / "ws.duckdb")
    desk = Guardrails(store, context_for=lambda now: Context(topology, gpus, (), now))
    incident = Incident(
        incident_id="INC-1", opened_ts_s=NOW_TS_S - 300, last_ts_s=NOW_TS_S, title="site cap", severity="warning",
        components=["fleet"], symptoms=[],
    )  # fmt: skip
    top = Hypothesis(root_cause="power_cap", component="fleet", confidence=0.9, summary="")
    draft = _step(targets)
    fsyncs = [0]
    real_fsync = os.fsync

    def counted_fsync(fd: Any) -> None:
        fsyncs[0] += 1
        real_fsync(fd)

    os.fsync = counted_fsync  # this process only, for the count
    try:
        cpu0_s, wall0_s = _cpu_s(), time.perf_counter()
        _, filed = file_plan(desk, incident, top, [draft], "bench")
        cpu_s, wall_s = _cpu_s() - cpu0_s, time.perf_counter() - wall0_s
    finally:
        os.fsync = real_fsync
    witness = Path(str(folder / "ws.duckdb") + ".witness")
    result = {
        "targets": count,
        "filed": len(filed),
        "cpu_s": round(cpu_s, 3),
        "wall_s": round(wall_s, 3),
        "os_fsyncs": fsyncs[0],
        "witness_lines": len(witness.read_text().splitlines()) if witness.exists() else 0,
        "audit_rows": len(read_rows(store)),
    }
    store.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--targets", type=int, nargs="+", default=[1000, 5000])
    args = parser.parse_args()
    for count in args.targets:
        with tempfile.TemporaryDirectory(prefix="aiops-bench-step-") as folder:
            print(json.dumps(file_one_step(Path(folder), count)), flush=True)


if __name__ == "__main__":
    main()
