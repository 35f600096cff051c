"""Which GPUs, nodes and NICs a component name covers, so the blast radius of `rack1` or `fleet` is counted
in the units it touches. Built from the store's `topology`/`job_ranks` tables or from a cluster shape."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiops.labels import gpu_name, nic_name, node_name, rack_name


@dataclass(frozen=True)
class Scope:
    """What one target expands to. `units` are the components rate limits are counted against."""

    component: str
    kind: str  # fleet | rack | node | gpu | nic | job | policy
    racks: tuple[str, ...] = ()
    nodes: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    nics: tuple[str, ...] = ()

    @property
    def units(self) -> frozenset[str]:
        if self.gpus:
            return frozenset(self.gpus)
        if self.nodes:
            return frozenset(self.nodes)
        if self.nics:
            return frozenset(self.nics)
        return frozenset({self.component})


@dataclass(frozen=True)
class Topology:
    rack_nodes: Mapping[str, tuple[str, ...]]
    node_gpus: Mapping[str, tuple[str, ...]]
    node_nics: Mapping[str, tuple[str, ...]]
    job_gpus: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # job name (no prefix) -> GPUs
    policies: frozenset[str] = frozenset()  # rule ids a `policy:<id>` target may name

    @classmethod
    def grid(
        cls,
        racks: int = 2,
        nodes_per_rack: int = 4,
        gpus_per_node: int = 8,
        nics_per_node: int = 2,
        *,
        jobs: Mapping[str, Iterable[str]] | None = None,
        policies: Iterable[str] = (),
    ) -> Topology:
        """The scenario contract's cluster shape (its defaults), node indices global from 0."""
        rack_nodes: dict[str, tuple[str, ...]] = {}
        node_gpus: dict[str, tuple[str, ...]] = {}
        node_nics: dict[str, tuple[str, ...]] = {}
        for r in range(racks):
            nodes = [r * nodes_per_rack + i for i in range(nodes_per_rack)]
            rack_nodes[rack_name(r)] = tuple(node_name(n) for n in nodes)
            for n in nodes:
                node_gpus[node_name(n)] = tuple(gpu_name(n, g) for g in range(gpus_per_node))
                node_nics[node_name(n)] = tuple(nic_name(n, k) for k in range(nics_per_node))
        job_gpus = {name: tuple(gpus) for name, gpus in (jobs or {}).items()}
        return cls(rack_nodes, node_gpus, node_nics, job_gpus, frozenset(policies))

    @classmethod
    def from_rows(
        cls,
        topology_rows: Iterable[Mapping[str, Any]],
        job_rank_rows: Iterable[Mapping[str, Any]] = (),
        policies: Iterable[str] = (),
    ) -> Topology:
        """From rows of the store's `topology` (component, kind, parent) and `job_ranks` (job, gpu) tables."""
        rack_nodes: dict[str, list[str]] = {}
        node_gpus: dict[str, list[str]] = {}
        node_nics: dict[str, list[str]] = {}
        for row in topology_rows:
            kind, component, parent = str(row["kind"]), str(row["component"]), str(row["parent"] or "")
            if kind == "rack":
                rack_nodes.setdefault(component, [])
            elif kind == "node":
                rack_nodes.setdefault(parent, []).append(component)
                node_gpus.setdefault(component, [])
                node_nics.setdefault(component, [])
            elif kind == "gpu":
                node_gpus.setdefault(parent, []).append(component)
            elif kind == "nic":
                node_nics.setdefault(parent, []).append(component)
        job_gpus: dict[str, list[str]] = {}
        for row in job_rank_rows:
            job_gpus.setdefault(str(row["job"]), []).append(str(row["gpu"]))
        return cls(
            {k: tuple(v) for k, v in rack_nodes.items()},
            {k: tuple(v) for k, v in node_gpus.items()},
            {k: tuple(v) for k, v in node_nics.items()},
            {k: tuple(v) for k, v in job_gpus.items()},
            frozenset(policies),
        )

    def _node_rack(self, node: str) -> str:
        return next((r for r, nodes in self.rack_nodes.items() if node in nodes), "")

    def _of_nodes(self, component: str, kind: str, nodes: Iterable[str]) -> Scope:
        nodes = tuple(nodes)
        racks = tuple(dict.fromkeys(self._node_rack(n) for n in nodes))
        gpus = tuple(g for n in nodes for g in self.node_gpus.get(n, ()))
        nics = tuple(k for n in nodes for k in self.node_nics.get(n, ()))
        return Scope(component, kind, racks, nodes, gpus, nics)

    def expand(self, component: str) -> Scope | None:
        """The scope of a component name, or None when the name is not in this topology (exact match only:
        `node３` with a full-width digit is not `node3`)."""
        if component == "fleet":
            return self._of_nodes(component, "fleet", [n for ns in self.rack_nodes.values() for n in ns])
        if component in self.rack_nodes:
            return self._of_nodes(component, "rack", self.rack_nodes[component])
        if component in self.node_gpus:
            return self._of_nodes(component, "node", [component])
        for node, gpus in self.node_gpus.items():
            if component in gpus:
                return Scope(component, "gpu", (self._node_rack(node),), (node,), (component,), ())
        for node, nics in self.node_nics.items():
            if component in nics:
                return Scope(component, "nic", (self._node_rack(node),), (node,), (), (component,))
        if component.startswith("job:") and component[4:] in self.job_gpus:
            gpus = self.job_gpus[component[4:]]
            nodes = tuple(dict.fromkeys(n for n, gs in self.node_gpus.items() for g in gpus if g in gs))
            racks = tuple(dict.fromkeys(self._node_rack(n) for n in nodes))
            return Scope(component, "job", racks, nodes, gpus, ())
        if component.startswith("policy:") and component[7:] in self.policies:
            return Scope(component, "policy")
        return None
