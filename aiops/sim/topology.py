"""The simulated cluster's inventory: racks → nodes → GPUs and NICs, and jobs → ranks (one rank per GPU)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from aiops.scenarios import Scenario

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


def clamp(values: F64, lo: float, hi: float) -> F64:
    """`np.clip(values, lo, hi)` for the twin's per-step arrays (the same numbers, NaN included): two ufunc
    calls cost a fraction of np.clip's Python wrapper on arrays of a few dozen entries, and a step clips a lot."""
    return np.minimum(np.maximum(values, lo), hi)


def any_true(mask: Bools) -> bool:
    """`bool(mask.any())` for the twin's small masks: a list's `any` costs a fraction of numpy's reduction."""
    return any(mask.tolist())


def all_true(mask: Bools) -> bool:
    """`bool(mask.all())`, as `any_true`."""
    return all(mask.tolist())


def largest(values: F64) -> float:
    """`float(values.max())` for small arrays of finite numbers (no NaN: Python's `max` does not propagate it)."""
    return float(max(values.tolist()))


def filled(size: int, value: float) -> F64:
    """`np.full(size, value)` (and np.ones) for the arrays a step allocates: their Python wrappers cost several
    times an empty array and a fill at the twin's sizes."""
    out = np.empty(size)
    out.fill(value)
    return out


@dataclass
class JobLayout:
    name: str
    index: int
    gpus: I64  # global GPU indices, in rank order
    nodes: list[int]
    nics: I64  # the NICs its ranks send through
    step_compute_s: float
    allreduce_mb: float
    checkpoint_every_s: float | None
    checkpoint_gb: float


class Layout:
    """Index maps between contract names and array positions. The inventory (racks, nodes, GPUs, NICs) is fixed;
    where jobs run changes only through `move_node`, which keeps every job map consistent (`JobLayout.gpus`,
    `.nodes`, `.nics`, `gpu_job`, `busy_nodes`, `in_job`, updated in place) and bumps `placement_version`."""

    def __init__(self, scenario: Scenario) -> None:
        c = scenario.cluster
        self.racks = c.racks
        self.nodes = c.nodes
        self.nodes_per_rack = c.nodes_per_rack
        self.gpus_per_node = c.gpus_per_node
        self.nics_per_node = c.nics_per_node
        self.gpu_count = self.nodes * c.gpus_per_node
        self.nic_count = self.nodes * c.nics_per_node
        self.gpu_node: I64 = np.repeat(np.arange(self.nodes, dtype=np.int64), c.gpus_per_node)
        self.gpu_local: I64 = np.tile(np.arange(c.gpus_per_node, dtype=np.int64), self.nodes)
        self.node_rack: I64 = np.arange(self.nodes, dtype=np.int64) // c.nodes_per_rack
        self.gpu_rack: I64 = self.node_rack[self.gpu_node]
        self.nic_node: I64 = np.repeat(np.arange(self.nodes, dtype=np.int64), c.nics_per_node)
        self.rack_names = [f"rack{r}" for r in range(self.racks)]
        self.node_names = [f"node{n}" for n in range(self.nodes)]
        self.gpu_names = [f"node{n}/gpu{g}" for n, g in zip(self.gpu_node, self.gpu_local, strict=True)]
        self.nic_names = [f"node{n}/nic{k}" for n in range(self.nodes) for k in range(c.nics_per_node)]
        self.gpu_index = {name: i for i, name in enumerate(self.gpu_names)}
        self.nic_index = {name: i for i, name in enumerate(self.nic_names)}
        # each GPU sends through one NIC of its node (GPU g uses NIC g mod nics), as rail-optimised clusters do
        self.gpu_nic: I64 = self.gpu_node * c.nics_per_node + (self.gpu_local % c.nics_per_node)
        self.jobs: list[JobLayout] = []
        for j, spec in enumerate(scenario.job_specs):
            nodes = scenario.job_nodes(spec)
            gpus = np.concatenate(
                [np.arange(n * c.gpus_per_node, (n + 1) * c.gpus_per_node, dtype=np.int64) for n in nodes]
            )
            nics = np.unique(self.gpu_nic[gpus])
            self.jobs.append(
                JobLayout(
                    spec.name,
                    j,
                    gpus,
                    nodes,
                    nics,
                    spec.step_compute_s,
                    spec.allreduce_mb,
                    spec.checkpoint_every_s,
                    spec.checkpoint_gb,
                )
            )
        self.gpu_job: I64 = np.full(self.gpu_count, -1, dtype=np.int64)
        self.busy_nodes: Bools = np.zeros(self.nodes, dtype=bool)
        for job in self.jobs:
            self.gpu_job[job.gpus] = job.index
            self.busy_nodes[job.nodes] = True
        self.in_job: Bools = self.gpu_job >= 0
        self.placement_version = 0  # bumped by every move, for readers that cache job placement

    def node_gpus(self, node: int) -> I64:
        return np.arange(node * self.gpus_per_node, (node + 1) * self.gpus_per_node, dtype=np.int64)

    def job_on(self, node: int) -> JobLayout | None:
        """The job whose ranks run on `node`, or None for an idle node."""
        if not self.busy_nodes[node]:
            return None
        return self.jobs[int(self.gpu_job[node * self.gpus_per_node])]

    def move_node(self, from_node: int, to_node: int) -> tuple[JobLayout, I64, I64]:
        """Move the ranks on `from_node` onto idle `to_node`, GPU-local order kept (the rank on gpu k moves to
        gpu k). Returns the job, the GPUs it left and the GPUs it now uses (same order). The caller checks that
        `from_node` runs a job and `to_node` is idle."""
        job = self.job_on(from_node)
        if job is None or self.busy_nodes[to_node]:
            raise ValueError(f"cannot move node{from_node} -> node{to_node}")
        old, new = self.node_gpus(from_node), self.node_gpus(to_node)
        gpus = job.gpus.copy()
        for old_gpu, new_gpu in zip(old.tolist(), new.tolist(), strict=True):
            gpus[gpus == old_gpu] = new_gpu
        job.gpus = gpus
        job.nodes = [to_node if n == from_node else n for n in job.nodes]
        job.nics = np.unique(self.gpu_nic[gpus])
        self.gpu_job[old] = -1
        self.gpu_job[new] = job.index
        self.busy_nodes[from_node] = False
        self.busy_nodes[to_node] = True
        self.in_job[:] = self.gpu_job >= 0
        self.placement_version += 1
        return job, old, new

    def gpus_of(self, component: str) -> I64:
        """GPU indices a component name covers (a GPU, a node, a rack, the fleet)."""
        if component == "fleet":
            return np.arange(self.gpu_count, dtype=np.int64)
        if component.startswith("rack"):
            return np.flatnonzero(self.gpu_rack == int(component[4:]))
        if "/gpu" in component:
            return np.array([self.gpu_index[component]], dtype=np.int64)
        if component.startswith("node") and "/" not in component:
            return np.flatnonzero(self.gpu_node == int(component[4:]))
        return np.array([], dtype=np.int64)

    def racks_of(self, component: str) -> I64:
        if component == "fleet":
            return np.arange(self.racks, dtype=np.int64)
        return np.unique(self.gpu_rack[self.gpus_of(component)])

    def rank_of(self, job: int, gpu: int) -> int:
        return int(np.flatnonzero(self.jobs[job].gpus == gpu)[0])
