"""The columns and types of the store's telemetry tables (aiops/store/migrations.py is the contract; a test checks
that these match it column for column and type for type). Collectors name their rows' columns with them; Arrow
batches are typed by `SCHEMAS`, so a column that is NULL in a whole batch still has its table's type.

The types are named here, not built: `SCHEMAS` (Arrow schemas) is made on first use, so a node agent that hands
its rows to the store as tuples never loads pyarrow (docs/BENCHMARKS.md, "Overhead").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiops.columns import (
    COLLECTIVE_SAMPLES,
    COOLING_DEVICE_SAMPLES,
    FLOW_CLASS_SAMPLES,
    GPU_SAMPLES,
    HOST_SAMPLES,
    HWMON_SAMPLES,
    IB_PORT_SAMPLES,
    JOB_STEPS,
    NETDEV_SAMPLES,
    NIC_SAMPLES,
    POWERCAP_SAMPLES,
    PSI_SAMPLES,
    RACK_SAMPLES,
    RANK_TIMING_SAMPLES,
    THERMAL_ZONE_SAMPLES,
    arrow_columns,
)

if TYPE_CHECKING:
    import pyarrow as pa

    SCHEMAS: dict[str, pa.Schema]  # made by __getattr__ below

# Arrow's type of each name (pyarrow's own factory names)
F, S, I64, I32, U64, B = "float64", "string", "int64", "int32", "uint64", "bool_"

_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "collective_samples": arrow_columns(COLLECTIVE_SAMPLES),
    "collector_errors": (("ts_s", F), ("collector", S), ("component", S), ("error", S), ("detail", S)),
    "cooling_device_samples": arrow_columns(COOLING_DEVICE_SAMPLES),
    "flow_class_samples": arrow_columns(FLOW_CLASS_SAMPLES),
    "gpu_events": (("ts_s", F), ("gpu", S), ("node", S), ("kind", S), ("xid", I32), ("message", S)),
    "gpu_samples": arrow_columns(GPU_SAMPLES),  # declared once: aiops/columns.py
    "gpu_processes": (
        ("ts_s", F),
        ("gpu", S),
        ("node", S),
        ("pid", I64),
        ("used_memory_bytes", I64),
        ("scheduler", S),
        ("job", S),
        ("rank", I32),
        ("local_rank", I32),
        ("world_size", I32),
        ("user", S),
        ("step", S),
        ("namespace", S),
        ("pod", S),
        ("container", S),
        ("owner", S),
    ),
    "host_samples": arrow_columns(HOST_SAMPLES),
    "job_ranks": (("job", S), ("rank", I32), ("gpu", S), ("node", S), ("nic", S)),
    "job_steps": arrow_columns(JOB_STEPS),
    "jobs": (
        ("job", S),
        ("nodes", I32),
        ("ranks", I32),
        ("checkpoint_every_s", F),
        ("checkpoint_gb", F),
        ("started_ts_s", F),
    ),
    "lane_rules": (
        ("ts_s", F),
        ("rule_id", S),
        ("match_kind", S),
        ("match_value", S),
        ("lane", S),
        ("scope", S),
    ),
    "nic_samples": arrow_columns(NIC_SAMPLES),
    "powercap_samples": arrow_columns(POWERCAP_SAMPLES),
    "rack_samples": arrow_columns(RACK_SAMPLES),
    "thermal_zone_samples": arrow_columns(THERMAL_ZONE_SAMPLES),
    "topology": (
        ("component", S),
        ("kind", S),
        ("parent", S),
        ("rack", S),
        ("node", S),
        ("idx", I32),
        ("pci_bus_id", S),
        ("uuid", S),
        ("serial", S),
        ("numa_node", I32),
        ("device", S),
        ("model", S),
        ("rail_nic", S),
    ),
    "psi_samples": arrow_columns(PSI_SAMPLES),
    "netdev_samples": arrow_columns(NETDEV_SAMPLES),
    "ib_port_samples": arrow_columns(IB_PORT_SAMPLES),
    "hwmon_samples": arrow_columns(HWMON_SAMPLES),
    "kernel_events": (
        ("ts_s", F),
        ("node", S),
        ("seq", I64),
        ("level", I32),
        ("kind", S),
        ("component", S),
        ("code", I32),
        ("pci_bus_id", S),
        ("message", S),
        ("device", S),  # m016
    ),
    "rank_timing_samples": arrow_columns(RANK_TIMING_SAMPLES),
}

# Columns no collector writes: a fleet row's sample weights (m017), set by aiops/fleet when it reads a node's
# GPUs at the scrape interval; NULL (one sample) on every row a collector writes.
FLEET_ONLY_COLUMNS: dict[str, tuple[str, ...]] = {
    "gpu_samples": tuple(c.name for c in GPU_SAMPLES.columns if not c.collected)
}

# The topology columns of m001; the rest (m007) are what discovery on a real host adds.
TOPOLOGY_BASE_COLUMNS: tuple[str, ...] = ("component", "kind", "parent", "rack", "node", "idx")

_SCHEMAS: dict[str, pa.Schema] = {}


def __getattr__(name: str) -> Any:
    """`SCHEMAS`, the Arrow schema of each table, built at its first use (PEP 562)."""
    if name != "SCHEMAS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _SCHEMAS:
        import pyarrow as pa

        for table, named in _COLUMNS.items():
            _SCHEMAS[table] = pa.schema([(column, getattr(pa, kind)()) for column, kind in named])
    return _SCHEMAS


def columns_typed(table: str) -> dict[str, str]:
    """column -> its Arrow type's pyarrow factory name (`float64`, `string`, ...); empty for an unknown table."""
    return dict(_COLUMNS.get(table, ()))


def columns(table: str) -> tuple[str, ...]:
    """The table's column names, in order (the twin asks for them at every step: made once per table)."""
    return _NAMES[table]


_NAMES: dict[str, tuple[str, ...]] = {table: tuple(n for n, _ in named) for table, named in _COLUMNS.items()}
