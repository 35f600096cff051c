"""What one node agent owns of a cluster's rows: the slice `aiops run --sim S --node NAME` collects, stores and
exports, and the slice the fleet eval replays into each node's exposition (aiops/fleet/history.py).

A real node agent sees its own GPUs, NICs, host and kernel; the job-level series a training job reports (step
times, collectives) come from the agent of the node that hosts the job's rank 0, as a launcher on that node
would report them; every node exports the lane rules in force on it. Rack sensors and DCIM signals belong to
no node: facility exporters and the DCIM input publish them (aiops/sources/facility.py), never a node agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Tables whose rows name their node in a `node` column.
NODE_TABLES = frozenset(
    {
        "gpu_samples",
        "gpu_events",
        "nic_samples",
        "flow_class_samples",
        "host_samples",
        "thermal_zone_samples",
        "cooling_device_samples",
        "powercap_samples",
        "psi_samples",
        "netdev_samples",
        "ib_port_samples",
        "hwmon_samples",
        "kernel_events",
        "log_events",
        "profile_runs",
        "rank_timing_samples",
    }
)
# The column that names the node where it is not `node`: a log line names the host it came from.
NODE_COLUMN = {"log_events": "host"}
JOB_TABLES = frozenset({"job_steps", "collective_samples", "jobs"})  # rows name a job, not a node
EVERY_NODE_TABLES = frozenset({"lane_rules", "collector_errors"})  # each agent has its own copy
FACILITY_TABLES = frozenset({"rack_samples", "dcim_signals"})  # no node agent's
FACILITY = (
    "facility"  # the twin's facility agent (`aiops run --sim S --node facility`): rack sensors and DCIM
)


def job_homes(ranks: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """job -> the node of its rank 0 (`job_ranks` rows): the agent that reports the job's steps."""
    homes: dict[str, tuple[int, str]] = {}
    for row in ranks:
        job, rank, node = str(row["job"]), int(row["rank"]), str(row["node"])
        if job not in homes or rank < homes[job][0]:
            homes[job] = (rank, node)
    return {job: node for job, (_, node) in homes.items()}


@dataclass(frozen=True)
class NodeSlice:
    """One node's share of the cluster: `node`, its `rack` (None: unknown, every rack row kept) and `homes`
    (`job_homes` of the cluster)."""

    node: str
    rack: str | None = None
    homes: Mapping[str, str] = field(default_factory=dict)

    def owns(self, table: str, values: Mapping[str, Any]) -> bool:
        """Whether this node's agent holds this row of `table`."""
        if self.node == FACILITY:  # the facility's exporters and DCIM: the racks, nothing of any node
            if table == "topology":
                return values.get("kind") in ("fleet", "rack")
            return table in FACILITY_TABLES
        if table in NODE_TABLES:
            return str(values.get(NODE_COLUMN.get(table, "node"))) == self.node
        if table in JOB_TABLES:
            return self.homes.get(str(values.get("job"))) == self.node
        if table in EVERY_NODE_TABLES:
            return True
        if table == "job_ranks":
            return self.homes.get(str(values.get("job"))) == self.node or str(values.get("node")) == self.node
        if table == "topology":
            kind = values.get("kind")
            if kind == "fleet":
                return True
            if kind == "rack":
                return self.rack is None or str(values.get("rack")) == self.rack
            return str(values.get("node")) == self.node
        return False  # facility tables, and anything unknown: never guessed into a node's slice

    def rows(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[Sequence[Any]]:
        """The rows of one batch this node owns (column order as given)."""
        if table in EVERY_NODE_TABLES and self.node != FACILITY:
            return list(rows)
        return [row for row in rows if self.owns(table, dict(zip(columns, row, strict=True)))]
