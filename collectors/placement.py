"""Where this node stands (issue 25 item 2): rack and row from the config (`[node] rack`, `[node] row`), or from
the node's Kubernetes labels where configured (`[collectors.workloads] node_rack_label`, `node_row_label`) with
zone and region from the well-known `topology.kubernetes.io/zone|region` labels, read once at start through the
official client (collectors/workloads/kubernetes.py `KubeApi.node_labels`). A label present wins over the
config; an unreachable API leaves the config's values and says why. GPU<->NIC rails stay PCI/NUMA discovery's
(collectors/topology.py); Slurm's topology is the Slurm collector's.

The result is one `node_placement` row (m020) and the rack the topology rows are written with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collectors.workloads.kubernetes import KubeApi

ZONE_LABEL = "topology.kubernetes.io/zone"
REGION_LABEL = "topology.kubernetes.io/region"
LABEL_VALUE_MAX = 63  # a Kubernetes label value's limit


@dataclass(frozen=True)
class Placement:
    node: str
    rack: str
    row: str | None
    zone: str | None
    region: str | None
    source: str  # "config", or "kubernetes" when a label gave the rack or row
    error: str | None = None  # why the labels could not be read


def _label(labels: Mapping[str, str], key: str) -> str | None:
    value = labels.get(key, "").strip() if key else ""
    return value[:LABEL_VALUE_MAX] if value else None


def placement_of(
    node: str,
    rack: str,
    row: str | None,
    labels: Mapping[str, str] | None,
    rack_label: str = "",
    row_label: str = "",
) -> Placement:
    """The node's placement from the config's rack and row and, where given, its labels."""
    if labels is None:
        return Placement(node, rack, row or None, None, None, "config")
    label_rack, label_row = _label(labels, rack_label), _label(labels, row_label)
    return Placement(
        node,
        label_rack or rack,
        label_row or row or None,
        _label(labels, ZONE_LABEL),
        _label(labels, REGION_LABEL),
        "kubernetes" if label_rack or label_row else "config",
    )


def read_placement(
    node: str,
    rack: str,
    row: str | None,
    api: KubeApi | None,
    rack_label: str = "",
    row_label: str = "",
) -> Placement:
    """`placement_of` with the labels read from the API server (`api`: None where none is configured)."""
    if api is None:
        return placement_of(node, rack, row, None)
    try:
        labels = api.node_labels()
    except Exception as exc:  # ApiException, urllib3 errors: the config's placement stands
        return Placement(
            node, rack, row or None, None, None, "config", f"{type(exc).__name__}: {str(exc)[:300]}"
        )
    return placement_of(node, rack, row, labels, rack_label, row_label)


def write_placement(conn: Any, found: Placement) -> None:
    """The node's `node_placement` row (replaced at every start)."""
    conn.execute(
        'INSERT OR REPLACE INTO node_placement (node, rack, "row", zone, region, source) VALUES (?, ?, ?, ?, ?, ?)',
        [found.node, found.rack, found.row, found.zone, found.region, found.source],
    )
