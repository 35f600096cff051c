"""The simulated cluster's inventory: racks → nodes → GPUs and NICs, and jobs → ranks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from aiops.scenarios import Scenario


@dataclass
class JobLayout:
    name: str
    index: int
    gpus: np.ndarray  # global GPU indices, rank order
    nodes: list[int]
    step_compute_s: float
    allreduce_mb: float
    checkpoint_every_s: float | None
    checkpoint_gb: float


class Layout:
    def __init__(self, scenario: Scenario) -> None:
        c = scenario.cluster
        self.racks = c.racks
        self.nodes = c.nodes
        self.gpus_per_node = c.gpus_per_node
        self.nics_per_node = c.nics_per_node
        self.gpu_count = self.nodes * c.gpus_per_node
        self.nic_count = self.nodes * c.nics_per_node
        self.gpu_node = np.repeat(np.arange(self.nodes), c.gpus_per_node)
        self.gpu_local = np.tile(np.arange(c.gpus_per_node), self.nodes)
        self.node_rack = np.arange(self.nodes) // c.nodes_per_rack
        self.gpu_rack = self.node_rack[self.gpu_node]
        self.nic_node = np.repeat(np.arange(self.nodes), c.nics_per_node)
        self.gpu_names = [f"node{n}/gpu{g}" for n, g in zip(self.gpu_node, self.gpu_local, strict=True)]
        self.nic_names = [f"node{n}/nic{k}" for n in range(self.nodes) for k in range(c.nics_per_node)]
        self.gpu_index = {name: i for i, name in enumerate(self.gpu_names)}
        self.nic_index = {name: i for i, name in enumerate(self.nic_names)}
        # each GPU sends through one NIC of its node (GPU g uses NIC g mod nics)
        self.gpu_nic = self.gpu_node * c.nics_per_node + (self.gpu_local % c.nics_per_node)
        self.jobs: list[JobLayout] = []
        for j, spec in enumerate(scenario.job_specs):
            nodes = scenario.job_nodes(spec)
            gpus = np.concatenate([np.arange(n * c.gpus_per_node, (n + 1) * c.gpus_per_node) for n in nodes])
            self.jobs.append(
                JobLayout(
                    spec.name,
                    j,
                    gpus,
                    nodes,
                    spec.step_compute_s,
                    spec.allreduce_mb,
                    spec.checkpoint_every_s,
                    spec.checkpoint_gb,
                )
            )
        self.busy_nodes = np.zeros(self.nodes, dtype=bool)
        for job in self.jobs:
            self.busy_nodes[job.nodes] = True
        self.gpu_job = np.full(self.gpu_count, -1)
        for job in self.jobs:
            self.gpu_job[job.gpus] = job.index

    def gpus_of(self, component: str) -> np.ndarray:
        """GPU indices a component name covers (a GPU, a node, a rack, the fleet)."""
        if component == "fleet":
            return np.arange(self.gpu_count)
        if component.startswith("rack"):
            return np.flatnonzero(self.gpu_rack == int(component[4:]))
        if "/gpu" in component:
            return np.array([self.gpu_index[component]])
        if component.startswith("node"):
            return np.flatnonzero(self.gpu_node == int(component[4:].split("/")[0]))
        return np.array([], dtype=int)

    def racks_of(self, component: str) -> np.ndarray:
        if component == "fleet":
            return np.arange(self.racks)
        return np.unique(self.gpu_rack[self.gpus_of(component)])
