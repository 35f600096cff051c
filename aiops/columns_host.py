"""host_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the recipe for
a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per node: /proc's CPU, iowait and memory
(collectors/procfs.py) and the training framework's data-loader wait per step."""

from __future__ import annotations

from aiops.column_model import Column, Family, Table

NODE_LABELS = ("node",)
INPUT = frozenset({"input_pipeline_bottleneck"})


def _gauge(name: str, help_text: str, unit: str, feeds: str) -> Family:
    return Family(f"aiops_host_{name}", help_text, unit, feeds, NODE_LABELS, per_gpu="—", per_node="1")


HOST_SAMPLES = Table(
    "host_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column(
            "cpu_util_pct",
            "float64",
            _gauge(
                "cpu_utilisation_ratio",
                "/proc/stat: share of CPU time not idle (0-1)",
                "ratio",
                "host_samples.cpu_util_pct: HOST_WINDOW_SQL, `Facts.hosts`",
            ),
            scale=0.01,
            reacts_to=INPUT,
            observed_by="node exporter (/proc/stat)",
        ),
        Column(
            "iowait_pct",
            "float64",
            _gauge(
                "cpu_iowait_ratio",
                "/proc/stat: share of CPU time in iowait (0-1)",
                "ratio",
                "host_samples.iowait_pct",
            ),
            scale=0.01,
        ),
        Column(
            "loader_wait_ms",
            "float64",
            _gauge(
                "loader_wait_seconds",
                "data-loader wait per step (the framework's hooks)",
                "seconds",
                "host_samples.loader_wait_ms: `loader_rules` (loader_outlier), `Facts.hosts` (input_pipeline_bottleneck)",
            ),
            scale=0.001,
            reacts_to=INPUT,
            observed_by="the training framework's data loader hook (time a step waited for its batch)",
        ),
        Column(
            "mem_used_pct",
            "float64",
            _gauge(
                "memory_used_ratio",
                "/proc/meminfo: share of memory in use (0-1)",
                "ratio",
                "host_samples.mem_used_pct",
            ),
            scale=0.01,
        ),
    ),
)
