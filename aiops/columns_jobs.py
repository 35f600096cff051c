"""The training jobs' tables, each column declared once (aiops/columns.py says what derives from a declaration; the
recipe for a new one: docs/ARCHITECTURE.md, "Add a telemetry column").

collective_samples: one row per job, collective op and scope per interval, from the NCCL profiler plugin and
PyTorch's watchdog (the twin's launcher) or the rank-timing probes (scope `node_ranks`). Its counts hold what
the interval added (`counted`: the node exports the running total per job, op and scope, the fleet reads the
increase); the latency quantiles are the interval's.

job_steps: one row per completed training step from the framework's step hook (the rank-timing probes' step
cadence where no hook reports), with the rank that reached the step's first collective last. Its families are
more than `stored * scale`, so `hand_written` (rendered in aiops/service/metrics_analyst_families.py `jobs`, read
back in aiops/fleet/pivot.py): the step times as a histogram, the newest step's time and completion, and the steps
in which each rank was the slowest.

A job's rows carry no node: its families are labelled with the node the agent runs as (the job's home,
aiops/service/node_slice.py)."""

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
    rows_react_to=(ANY, f"{PROFILER} reports nothing while the job stands"),
)

STEP_LABELS = ("node", "job")
STEPS = Family(
    "aiops_job_step_duration_seconds",
    "training steps completed and their time (the framework's step hook)",
    "seconds",
    "job_steps.step_time_s and count: STEP_WINDOW_SQL (`step_rules`: step_regression), `Facts.job_losses`; 12 "
    "buckets + sum + count",
    STEP_LABELS,
    per_gpu="—",
    per_node="14",
    histogram=True,
)
LAST_STEP = Family(
    "aiops_job_last_step_duration_seconds",
    "time of the newest completed step",
    "seconds",
    "job_steps.step_time_s of the newest step",
    STEP_LABELS,
    per_gpu="—",
    per_node="1",
)
LAST_STEP_TS = Family(
    "aiops_job_last_step_timestamp_seconds",
    "when the newest step completed (unix time)",
    "seconds",
    "max(job_steps.ts_s): `step_rules` (job_stalled), `Facts.job_losses` (stall)",
    STEP_LABELS,
    per_gpu="—",
    per_node="1",
)
SLOWEST = Family(
    "aiops_job_slowest_rank_steps_total",
    "steps in which this rank reached the step's first collective last (the straggler report)",
    "steps",
    "job_steps.slowest_rank, slowest_gpu: STEP_WINDOW_SQL.slowest_gpu, `Facts.stragglers`",
    (*STEP_LABELS, "rank", "gpu"),
    per_gpu="—",
    per_node="1–8",
)

JOB_STEPS = Table(
    "job_steps",
    (
        Column("ts_s", "float64", key=True),  # when the step completed
        Column("job", "string", key=True),
        Column("step", "int64"),
        Column("step_time_s", "float64", reacts_to=ANY, observed_by="the training framework's step hook"),
        Column("slowest_rank", "int32"),  # the rank that reached the step's first collective last
        Column(
            "slowest_gpu",
            "string",
            reacts_to=ANY,
            observed_by="the framework's straggler report (the rank that arrived last)",
        ),
        Column("ranks", "int32"),
    ),
    hand_written=(STEPS, LAST_STEP, LAST_STEP_TS, SLOWEST),
    rows_react_to=(ANY, "the step hook: a job that stalls or restarts takes fewer steps"),
)
