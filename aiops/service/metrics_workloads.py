"""Who runs on each GPU at /metrics: one info series per GPU and workload, `aiops_gpu_workload_info`, with the
`pod`, `namespace`, `container`, `job`, `rank` and `scheduler` labels, value 1, from the newest `gpu_processes`
collect (collectors/workloads).

Why an info series and not labels on every GPU family: a job moving on or off a GPU would end and start every
GPU series (temperature, power, clocks, ...) under new label sets, and each family would carry the pod's labels
once per process; an info series keeps the GPU families' series stable and the workload's in one family, joined
by `gpu` the Prometheus way (`aiops_gpu_power_watts * on(gpu) group_left(pod, namespace, job)
aiops_gpu_workload_info`). Cardinality is bounded: at most MAX_PER_GPU workloads per GPU, only the newest
collect, and no pid label (one per workload, not per process restart).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from aiops.text import plain

MAX_PER_GPU = 8
LABELS = ("gpu", "node", "scheduler", "job", "rank", "namespace", "pod", "container")


def _label(value: Any) -> str:
    return "" if value is None else plain(value)[:128]


class WorkloadExports:
    """The newest collect's workloads per GPU (the loop feeds `observe`, a scrape reads `metrics`)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.current: dict[tuple[str, ...], None] = {}

    def replace(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """The rows of one collect (none: nothing runs on this node's GPUs now) replace the last collect's."""
        current: dict[tuple[str, ...], None] = {}
        per_gpu: dict[str, int] = {}
        for values in rows:
            if values.get("job") is None:
                continue  # a process no resolver knows: nothing to label with
            key = tuple(_label(values.get(name)) for name in LABELS)
            if key not in current and per_gpu.get(key[0], 0) < MAX_PER_GPU:
                per_gpu[key[0]] = per_gpu.get(key[0], 0) + 1
                current[key] = None
        self.current = current

    def metrics(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            self.prefix + "gpu_workload_info",
            "1 per GPU and workload running on it (NVML processes -> cgroup, environment -> scheduler)",
            labels=list(LABELS),
        )
        for key in sorted(self.current):
            family.add_metric(list(key), 1.0)
        yield family
