"""Telemetry columns declared once: a table's column (its name, Arrow type, unit), the Prometheus family the node
agent exports it as (name, labels, scale to base units), whether the fleet reads it back from that export, and
which faults a real reading of it may react to. Derived from the declarations, never written again by hand:

- the collectors' Arrow schema (collectors/schema.py) and the store's column (`schema_additions(version)`, the
  SQL of the migration that adds it: aiops/store/migrations.py);
- the node's export (aiops/service/metrics.py `declared_metrics`: every declared family with `stored * scale`);
- the fleet's families (aiops/fleet/families.py) and its pivot back into the table (aiops/fleet/pivot.py);
- docs/METRICS.md's rows for the table's families (`markdown_rows`, checked by tests/test_telemetry_columns.py);
- the twin-leak test's allowance (tests/twin/twin_observed.py: the fault kinds `reacts_to` names, and a table's
  `rows_react_to` / `entities_react_to` for its row rate and its entities);
- the dcgm-exporter names (aiops/sources/names.py): /metrics/dcgm and `aiops analyze --prometheus`.

Migrated so far: gpu_samples (declared in aiops/columns_gpu.py), host_samples (aiops/columns_host.py) and
nic_samples (aiops/columns_nic.py: its counters `counted`, exported as running totals, read back as increases) and
netdev_samples (aiops/columns_netdev.py: the kernel's own cumulative counters), flow_class_samples
(aiops/columns_flows.py), ib_port_samples (aiops/columns_ib.py: the ports' cumulative counters) and
collective_samples (aiops/columns_jobs.py: counted per job, op and scope), job_steps (aiops/columns_jobs.py: its
families hand-written, a histogram of step times) and rank_timing_samples (aiops/columns_ranks.py: its families
hand-written, summed per rank and kind) and rack_samples (aiops/columns_rack.py: no node's family; its sensors'
default facility exporter series) and the host collectors' psi_samples, thermal_zone_samples, hwmon_samples,
cooling_device_samples and powercap_samples (aiops/columns_sensors.py: pressure stall times, thermal zones, hwmon
sensors, cooling devices and RAPL zones; the fleet reads none of them); the shape and the derivations in
aiops/column_model.py. The other tables are still listed by hand (docs/ARCHITECTURE.md "Add a telemetry column"
names where). A family whose rendering is more than `stored * scale` (a bit mask as one series per reason, an
error name as a label, the fleet's per-sample counts) is declared in its table's `hand_written` and rendered by
hand; everything else about it still derives. The recipe for a new column: docs/ARCHITECTURE.md,
"Add a telemetry column".
"""

from __future__ import annotations

from aiops.column_model import (
    ANY,
    CAPS,
    HEAT,
    IDLE,
    SQL_TYPES,
    Column,
    DcgmName,
    FacilityName,
    Family,
    Table,
    arrow_columns,
    dcgm_columns,
    exported,
    facility_columns,
    families,
    fleet_read,
    integer_families,
    leak_allowances,
    markdown_rows,
)

__all__ = [
    "ANY",
    "CAPS",
    "COLLECTIVE_SAMPLES",
    "COOLING_DEVICE_SAMPLES",
    "FLOW_CLASS_SAMPLES",
    "GPU_SAMPLES",
    "HEAT",
    "HOST_SAMPLES",
    "HWMON_SAMPLES",
    "IB_PORT_SAMPLES",
    "IDLE",
    "JOB_STEPS",
    "NETDEV_SAMPLES",
    "NIC_SAMPLES",
    "POWERCAP_SAMPLES",
    "PSI_SAMPLES",
    "RACK_SAMPLES",
    "RANK_TIMING_SAMPLES",
    "SQL_TYPES",
    "THERMAL_ZONE_SAMPLES",
    "Column",
    "DcgmName",
    "FacilityName",
    "Family",
    "Table",
    "arrow_columns",
    "dcgm_columns",
    "exported",
    "facility_columns",
    "families",
    "fleet_read",
    "integer_families",
    "leak_allowances",
    "markdown_rows",
]


from aiops.columns_flows import FLOW_CLASS_SAMPLES
from aiops.columns_gpu import GPU_SAMPLES
from aiops.columns_host import HOST_SAMPLES
from aiops.columns_ib import IB_PORT_SAMPLES
from aiops.columns_jobs import COLLECTIVE_SAMPLES, JOB_STEPS
from aiops.columns_netdev import NETDEV_SAMPLES
from aiops.columns_nic import NIC_SAMPLES
from aiops.columns_rack import RACK_SAMPLES
from aiops.columns_ranks import RANK_TIMING_SAMPLES
from aiops.columns_sensors import (
    COOLING_DEVICE_SAMPLES,
    HWMON_SAMPLES,
    POWERCAP_SAMPLES,
    PSI_SAMPLES,
    THERMAL_ZONE_SAMPLES,
)

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        GPU_SAMPLES,
        HOST_SAMPLES,
        NIC_SAMPLES,
        NETDEV_SAMPLES,
        FLOW_CLASS_SAMPLES,
        IB_PORT_SAMPLES,
        COLLECTIVE_SAMPLES,
        RANK_TIMING_SAMPLES,
        JOB_STEPS,
        RACK_SAMPLES,
        PSI_SAMPLES,
        THERMAL_ZONE_SAMPLES,
        HWMON_SAMPLES,
        COOLING_DEVICE_SAMPLES,
        POWERCAP_SAMPLES,
    )
}


# -- what derives --------------------------------------------------------------------------------------------
def schema_additions(version: int) -> str:
    """The SQL of migration `version`: every declared column it adds (`;\\n`-separated, as migrations run)."""
    return ";\n".join(
        f"ALTER TABLE {t.name} ADD COLUMN IF NOT EXISTS {c.name} {SQL_TYPES[c.arrow]}"
        for t in TABLES.values()
        for c in t.columns
        if c.migration == version
    )


if __name__ == "__main__":  # python -m aiops.columns: the rows to paste into docs/METRICS.md, table by table
    for t in TABLES.values():
        print(f"<!-- {t.name} -->")
        print("\n".join(markdown_rows(t)))
