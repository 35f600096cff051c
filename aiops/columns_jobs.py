"""The training jobs' tables, each column declared once (aiops/columns.py says what derives from a declaration; the
recipe for a new one: docs/ARCHITECTURE.md, "Add a telemetry column").

collective_samples: one row per job, collective op and scope per interval, from the NCCL profiler plugin and
PyTorch's watchdog (the twin's launcher) or the rank-timing probes (scope `node_ranks`). Its counts hold what
the interval added (`counted`: the node exports the running total per job, op and scope, the fleet reads the
increase); the latency quantiles are the interval's. A job's rows carry no node: its families are labelled with
the node the agent runs as (the job's home, aiops/service/node_slice.py)."""

from __future__ import annotations

from aiops.column_model import ANY, Column, Family, Table

JOB_LABELS = ("node", "job", "op", "scope")
PROFILER = "the NCCL profiler plugin"


def _collective(name: str, help_text: str, unit: str, feeds: str) -> Family:
    return Family(f"aiops_collective_{name}", help_text, unit, feeds, JOB_LABELS, per_gpu="—", per_node="1–6")


COLLECTIVE_SAMPLES = Table(
    "collective_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("job", "string", key=True),
        Column("op", "string", key=True),
        Column("scope", "string", key=True),
        Column("interval_s", "float64"),
        Column(
            "count",
            "int64",
            _collective(
                "operations_total",
                "collective operations completed (NCCL profiler)",
                "operations",
                "collective_samples.count: COLLECTIVE_WINDOW_SQL.ops",
            ),
            counted=True,
            reacts_to=ANY,
            observed_by=f"{PROFILER} (collectives completed; a slow job runs fewer)",
        ),
        Column(
            "bytes",
            "int64",
            _collective("bytes_total", "bytes the collectives moved", "bytes", "collective_samples.bytes"),
            counted=True,
            reacts_to=ANY,
            observed_by=PROFILER,
        ),
        Column(
            "latency_p50_ms",
            "float64",
            _collective(
                "latency_p50_seconds",
                "median latency in the last interval",
                "seconds",
                "collective_samples.latency_p50_ms: COLLECTIVE_WINDOW_SQL.p50_ms",
            ),
            scale=0.001,
            reacts_to=ANY,
            observed_by=PROFILER,
        ),
        Column(
            "latency_p99_ms",
            "float64",
            _collective(
                "latency_p99_seconds",
                "99th percentile latency, last interval",
                "seconds",
                "collective_samples.latency_p99_ms: `collective_rules` (collective_latency)",
            ),
            scale=0.001,
            reacts_to=ANY,
            observed_by=PROFILER,
        ),
        Column(
            "timeouts",
            "int64",
            _collective(
                "timeouts_total",
                "collectives that timed out (watchdog)",
                "operations",
                "collective_samples.timeouts: `collective_rules` (collective_timeouts)",
            ),
            counted=True,
        ),
    ),
)
