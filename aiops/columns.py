"""Telemetry columns declared once: a table's column (its name, Arrow type, unit), the Prometheus family the node
agent exports it as (name, labels, scale to base units), whether the fleet reads it back from that export, and
which faults a real reading of it may react to. Derived from the declarations, never written again by hand:

- the collectors' Arrow schema (collectors/schema.py) and the store's column (`schema_additions(version)`, the
  SQL of the migration that adds it: aiops/store/migrations.py);
- the node's export (aiops/service/metrics.py `_gpu_metrics`: every declared family with `stored * scale`);
- the fleet's families (aiops/fleet/families.py) and its pivot back into the table (aiops/fleet/pivot.py);
- docs/METRICS.md's rows for the table's families (`markdown_rows`, checked by tests/test_telemetry_columns.py);
- the twin-leak test's allowance (tests/security/twin_observed.py: the fault kinds `reacts_to` names).

Migrated so far: gpu_samples. A family whose rendering is more than `stored * scale` (a bit mask as one series
per reason, an error name as a label, the fleet's per-sample counts) is declared in its table's `hand_written` and rendered
by hand; everything else about it still derives. The recipe for a new column: docs/ARCHITECTURE.md, "Adding a
telemetry column".
"""

from __future__ import annotations

from aiops.column_model import (
    ANY,
    CAPS,
    GPU_LABELS,
    HEAT,
    IDLE,
    NVLINK,
    PCIE,
    SQL_TYPES,
    TWIN_GPUS_PER_NODE,
    Column,
    Family,
    Table,
)

__all__ = ["ANY", "CAPS", "HEAT", "IDLE", "SQL_TYPES", "Column", "Family", "Table"]


def _gauge(name: str, help_text: str, unit: str, feeds: str) -> Family:
    return Family(f"aiops_gpu_{name}", help_text, unit, feeds)


_ECC = Family(
    "aiops_gpu_ecc_errors_total",
    "ECC errors (volatile)",
    "errors",
    "gpu_samples.ecc_sbe_total, ecc_dbe_total: `Detector._gpus` (ecc_dbe), `Facts.gpu_changes`",
    (*GPU_LABELS, "type"),
    per_gpu="2",
)
_NVLINK = Family(
    "aiops_gpu_nvlink_errors_total",
    "NVLink errors",
    "errors",
    "gpu_samples.nvlink_crc_total, nvlink_replay_total: `Detector._gpus` (nvlink_errors)",
    (*GPU_LABELS, "type"),
    per_gpu="2",
)
_F, _S, _I64, _I32, _U64 = "float64", "string", "int64", "int32", "uint64"

GPU_SAMPLES = Table(
    "gpu_samples",
    (
        Column("ts_s", _F, key=True),
        Column("gpu", _S, key=True),
        Column("node", _S, key=True),
        Column("uuid", _S, key=True),
        Column(
            "util_pct",
            _F,
            _gauge(
                "utilization_ratio",
                "share of time a kernel ran (0-1)",
                "ratio",
                "gpu_samples.util_pct: `Facts.idle_gpus`, `Facts.gpu_changes`",
            ),
            scale=0.01,
            reacts_to=ANY,
            observed_by="nvmlDeviceGetUtilizationRates (a GPU that waits is idle)",
        ),
        Column("mem_util_pct", _F, fleet=False, reacts_to=ANY, observed_by="nvmlDeviceGetUtilizationRates"),
        Column(
            "sm_clock_mhz",
            _F,
            _gauge("sm_clock_hertz", "SM clock", "hertz", "gpu_samples.sm_clock_mhz: `Facts.around_onset`"),
            scale=1e6,
            reacts_to=CAPS | HEAT,
            observed_by="nvmlDeviceGetClockInfo(NVML_CLOCK_SM): lower under a cap or heat",
        ),
        Column(
            "max_sm_clock_mhz",
            _F,
            _gauge(
                "sm_clock_max_hertz",
                "maximum SM clock",
                "hertz",
                "gpu_samples.max_sm_clock_mhz: GPU_WINDOW_SQL",
            ),
            scale=1e6,
        ),
        Column("mem_clock_mhz", _F, fleet=False),
        Column(
            "power_w",
            _F,
            _gauge(
                "power_watts",
                "GPU power draw (nvmlDeviceGetPowerUsage)",
                "watts",
                "gpu_samples.power_w: `Facts.around_onset`",
            ),
            reacts_to=ANY,
            observed_by="nvmlDeviceGetPowerUsage (follows the work the GPU does)",
        ),
        Column(
            "power_limit_w",
            _F,
            _gauge(
                "power_limit_watts",
                "enforced power limit (nvmlDeviceGetEnforcedPowerLimit)",
                "watts",
                "gpu_samples.power_limit_w: `Detector._gpus` (power_limit_drop, routine cap), `Facts.gpu_changes`",
            ),
            reacts_to=frozenset({"power_cap_misconfig", "facility_power_cap"}),
            observed_by="nvmlDeviceGetEnforcedPowerLimit: the limit a misconfiguration or the facility's cap set",
        ),
        Column(
            "power_limit_min_w",
            _F,
            _gauge(
                "power_limit_min_watts",
                "lowest settable power limit (NVML constraints)",
                "watts",
                "gpu_samples.power_limit_min_w (playbooks' bounds)",
            ),
        ),
        Column(
            "power_limit_max_w",
            _F,
            _gauge(
                "power_limit_max_watts",
                "highest settable power limit (NVML constraints)",
                "watts",
                "gpu_samples.power_limit_max_w: routine power cap (`ROUTINE_POWER_CAP_SQL`), `Facts.gpu_changes`",
            ),
        ),
        Column(
            "temp_c",
            _F,
            _gauge(
                "temperature_celsius",
                "GPU die temperature (nvmlDeviceGetTemperature)",
                "celsius",
                "gpu_samples.temp_c: `Detector._gpus` (gpu_hot), `Facts.gpu_changes`, `Facts.throttled`",
            ),
            reacts_to=ANY,
            observed_by="nvmlDeviceGetTemperature (follows the GPU's power and its coolant)",
        ),
        Column(
            "mem_temp_c",
            _F,
            _gauge(
                "memory_temperature_celsius",
                "HBM temperature (NVML field 82)",
                "celsius",
                "gpu_samples.mem_temp_c (console, reports)",
            ),
            reacts_to=ANY,
            observed_by="nvmlDeviceGetFieldValues(NVML_FI_DEV_MEMORY_TEMP)",
        ),
        Column(
            "slowdown_temp_c",
            _F,
            _gauge(
                "slowdown_temperature_celsius",
                "NVML slowdown threshold",
                "celsius",
                "gpu_samples.slowdown_temp_c: `Facts.throttled`",
            ),
        ),
        Column(  # hand-written: aiops_gpu_clocks_event_reason, aiops_gpu_clocks_event_samples_total
            "clocks_event_reasons",
            _U64,
            reacts_to=CAPS | HEAT | IDLE,
            observed_by="nvmlDeviceGetCurrentClocksEventReasons: SwPowerCap / HW slowdown bits while the cap or "
            "brake holds, the thermal bits while the GPU is hot, GpuIdle while its job waits",
        ),
        Column("ecc_sbe_total", _I64, _ECC, fixed=(("type", "corrected"),)),
        Column("ecc_dbe_total", _I64, _ECC, fixed=(("type", "uncorrected"),)),
        Column(
            "pcie_replay_total",
            _I64,
            Family(
                "aiops_gpu_pcie_replays_total",
                "PCIe replay counter",
                "replays",
                "gpu_samples.pcie_replay_total: `Detector._gpus` (pcie_replay)",
            ),
            reacts_to=PCIE,
            observed_by="nvmlDeviceGetPcieReplayCounter",
        ),
        Column(
            "pcie_link_gen",
            _I32,
            _gauge(
                "pcie_link_generation",
                "current PCIe link generation",
                "generation",
                "gpu_samples.pcie_link_gen: `Facts.gpu_changes`",
            ),
            reacts_to=PCIE,
            observed_by="nvmlDeviceGetCurrPcieLinkGeneration",
        ),
        Column(
            "pcie_link_width",
            _I32,
            _gauge(
                "pcie_link_width_lanes",
                "current PCIe link width",
                "lanes",
                "gpu_samples.pcie_link_width: `Detector._gpus` (pcie_downtrain)",
            ),
            reacts_to=PCIE,
            observed_by="nvmlDeviceGetCurrPcieLinkWidth",
        ),
        Column(
            "pcie_link_max_width",
            _I32,
            _gauge(
                "pcie_link_width_max_lanes",
                "maximum PCIe link width",
                "lanes",
                "gpu_samples.pcie_link_max_width: `Detector._gpus` (pcie_downtrain)",
            ),
        ),
        Column(
            "nvlink_crc_total",
            _I64,
            _NVLINK,
            fixed=(("type", "crc"),),
            reacts_to=NVLINK,
            observed_by="nvmlDeviceGetNvLinkErrorCounter (CRC)",
        ),
        Column(
            "nvlink_replay_total",
            _I64,
            _NVLINK,
            fixed=(("type", "replay"),),
            reacts_to=NVLINK,
            observed_by="nvmlDeviceGetNvLinkErrorCounter (replay)",
        ),
        Column(  # hand-written: aiops_gpu_nvml_error, aiops_gpu_nvml_error_samples_total
            "nvml_error",
            _S,
            reacts_to=frozenset({"gpu_fell_off_bus"}),
            observed_by="NVML answers NVML_ERROR_GPU_IS_LOST for a GPU off the bus until it is reset, and "
            "NVML_ERROR_TIMEOUT for the node's other GPUs while the driver handles the loss (Xid 79, NVIDIA Xid "
            "catalogue)",
        ),
        Column(
            "power_limit_default_w",
            _F,
            _gauge(
                "power_limit_default_watts",
                "default power limit (nvmlDeviceGetPowerManagementDefaultLimit)",
                "watts",
                "gpu_samples.power_limit_default_w (power envelopes)",
            ),
            migration=6,
        ),
        Column(
            "retired_rows",
            _I32,
            _gauge(
                "retired_memory_rows",
                "memory rows the GPU retired for uncorrectable errors (nvmlDeviceGetRemappedRows; "
                "nvmlDeviceGetRetiredPages for double-bit ECC before Ampere)",
                "rows",
                "gpu_samples.retired_rows: `Facts.gpu_changes` (an evidence line when it rises)",
            ),
            reacts_to=frozenset({"gpu_ecc_error"}),
            observed_by="nvmlDeviceGetRemappedRows: the row an uncorrectable error hit is remapped (Xid 63)",
            migration=36,
        ),
        # the fleet's sample weights (m017): hand-written families, read back by hand (aiops/fleet/pivot.py)
        Column("samples", _I32, collected=False, migration=17),
        Column("throttled_samples", _I32, collected=False, migration=17),
        Column("idle_samples", _I32, collected=False, migration=17),
    ),
    hand_written=(
        Family(
            "aiops_gpu_clocks_event_reason",
            "1 while NVML reports the clocks-event reason (nvmlClocksEventReason*)",
            "0/1",
            "gpu_samples.clocks_event_reasons, newest sample (one series per NVML reason bit)",
            (*GPU_LABELS, "reason"),
            per_gpu="8",
        ),
        Family(
            "aiops_gpu_nvml_error",
            "1 while NVML answers this GPU with an error",
            "0/1",
            "gpu_samples.nvml_error, newest sample",
            (*GPU_LABELS, "error"),
            per_gpu="—",
            per_node="events",
        ),
        Family(
            "aiops_gpu_samples_total",
            "NVML samples taken (the denominator of the per-sample counts)",
            "samples",
            "count(*) of gpu_samples: GPU_WINDOW_SQL.samples (the denominator of the throttle and idle rules)",
        ),
        Family(
            "aiops_gpu_throttled_samples_total",
            "samples with a throttle reason set (SwPowerCap, HwSlowdown, thermal, power brake: nvml_bits.THROTTLE)",
            "samples",
            "GPU_WINDOW_SQL.throttled: `Detector._gpus` (gpu_throttle: ≥ 2 and ≥ 30 % of a window's samples)",
        ),
        Family(
            "aiops_gpu_nvml_error_samples_total",
            "samples NVML answered with an error",
            "samples",
            "count(nvml_error): `Detector._gpus` (gpu_lost), `Facts.gpu_changes`",
        ),
        Family(
            "aiops_gpu_clocks_event_samples_total",
            "samples with the clocks-event reason set (nvmlClocksEventReason*): countable at any scrape interval",
            "samples",
            "samples per reason bit: GPU_WINDOW_SQL.idle (GpuIdle), `Facts.throttled` (brake_samples: "
            "HwPowerBrakeSlowdown), `Facts.idle_gpus`",
            (*GPU_LABELS, "reason"),
            per_gpu="8",
        ),
    ),
)

TABLES: dict[str, Table] = {GPU_SAMPLES.name: GPU_SAMPLES}


# -- what derives --------------------------------------------------------------------------------------------
def arrow_columns(table: Table) -> tuple[tuple[str, str], ...]:
    """(column, Arrow factory name) of what collectors write, in the order their rows hold them."""
    return tuple((c.name, c.arrow) for c in table.columns if c.collected)


def schema_additions(version: int) -> str:
    """The SQL of migration `version`: every declared column it adds (`;\\n`-separated, as migrations run)."""
    return ";\n".join(
        f"ALTER TABLE {t.name} ADD COLUMN IF NOT EXISTS {c.name} {SQL_TYPES[c.arrow]}"
        for t in TABLES.values()
        for c in t.columns
        if c.migration == version
    )


def exported(table: Table) -> tuple[Column, ...]:
    """Columns the node exports as `stored * scale`, each under its family with its fixed labels."""
    return tuple(c for c in table.columns if c.family is not None)


def families(table: Table) -> tuple[Family, ...]:
    """Every family the table's columns are served as, declared ones first, each once, in declaration order."""
    out: dict[str, Family] = {}
    for c in exported(table):
        assert c.family is not None
        out.setdefault(c.family.name, c.family)
    for f in table.hand_written:
        out.setdefault(f.name, f)
    return tuple(out.values())


def fleet_read(table: Table) -> tuple[Column, ...]:
    """Columns the fleet reads back from their family (the pivot's derived part)."""
    return tuple(c for c in exported(table) if c.fleet)


def integer_families(table: Table) -> tuple[str, ...]:
    """Families whose columns are 32-bit integers (the fleet bounds their samples to fit)."""
    return tuple(dict.fromkeys(c.family.name for c in exported(table) if c.family and c.arrow == _I32))


def leak_allowances(table: Table) -> dict[tuple[str, str], tuple[frozenset[str], str]]:
    """(table, column) -> (fault kinds, real source): what the twin-leak test lets carry fault information."""
    return {(table.name, c.name): (c.reacts_to, c.observed_by) for c in table.columns if c.reacts_to}


def markdown_rows(table: Table) -> list[str]:
    """docs/METRICS.md's rows for the table's families."""
    rows = []
    for f in families(table):
        per_node = f.per_node or str(int(f.per_gpu) * TWIN_GPUS_PER_NODE)
        cells = (f"`{f.name}`", f.kind, ", ".join(f.labels), f.unit, f.feeds, f.per_gpu, per_node)
        rows.append("| " + " | ".join(cells) + " |")
    return rows


if __name__ == "__main__":  # python -m aiops.columns: the rows to paste into docs/METRICS.md
    for t in TABLES.values():
        print("\n".join(markdown_rows(t)))
