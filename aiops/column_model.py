"""The shape of a telemetry column's declaration (aiops/columns.py declares the columns and derives from them):
a `Column` of a `Table`, the Prometheus `Family` it is served as, and the fault-kind sets its `reacts_to` names."""

from __future__ import annotations

from dataclasses import dataclass

from aiops.labels import FAULT_KINDS

ANY = frozenset(FAULT_KINDS)  # a measurement that follows the work, heat and traffic of the cluster
CAPS = frozenset({"power_cap_misconfig", "facility_power_cap", "power_brake", "thermal_throttle"})
HEAT = frozenset({"thermal_throttle", "rack_cooling_failure", "ambient_drift"})
IDLE = frozenset(
    {"gpu_ecc_error", "application_error", "input_pipeline_bottleneck"}
)  # the job stops: GPUs idle
PCIE = frozenset({"pcie_degraded"})
NVLINK = frozenset({"nvlink_degraded"})

# Arrow's factory name -> the store's SQL type
SQL_TYPES = {
    "float64": "DOUBLE",
    "string": "VARCHAR",
    "int64": "BIGINT",
    "int32": "INTEGER",
    "uint64": "UBIGINT",
}
GPU_LABELS = ("gpu", "node")
TWIN_GPUS_PER_NODE = 8  # the default twin node docs/METRICS.md counts series on


@dataclass(frozen=True)
class Family:
    """A Prometheus family the node agent serves. `name` as Prometheus stores it (a counter's with `_total`)."""

    name: str
    help: str
    unit: str  # docs/METRICS.md's unit column (Prometheus base units)
    feeds: str  # docs/METRICS.md's "feeds (analyst input)" column: what reads it
    labels: tuple[str, ...] = GPU_LABELS
    per_gpu: str = "1"  # series per GPU ("—" with per_node "events" for one per event)
    per_node: str = ""  # default: per_gpu times the twin node's 8 GPUs

    @property
    def kind(self) -> str:
        return "counter" if self.name.endswith("_total") else "gauge"


@dataclass(frozen=True)
class Column:
    name: str
    arrow: str  # pyarrow factory name: float64, int64, int32, uint64, string
    family: Family | None = None  # exported as `stored * scale` (None: not exported, or by hand)
    scale: float = 1.0
    fixed: tuple[tuple[str, str], ...] = ()  # labels beside GPU_LABELS that tell columns of one family apart
    fleet: bool = True  # the fleet reads it back from the family (aiops/fleet/pivot.py)
    reacts_to: frozenset[str] = frozenset()  # fault kinds a real reading of it may change with
    observed_by: str = ""  # the real source that reports that change
    collected: bool = True  # False: no collector writes it (the fleet's sample weights)
    key: bool = False  # an entity key (ts_s, gpu, node, uuid): never a family of its own
    migration: int = 1  # the migration that added it (schema_additions)


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]
    hand_written: tuple[Family, ...] = ()  # families rendered by hand from the table's columns

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)
