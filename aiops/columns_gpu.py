"""gpu_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the recipe for
a new one: docs/ARCHITECTURE.md, "Add a telemetry column")."""

from __future__ import annotations

from aiops.column_model import (
    ANY,
    CAPS,
    GPU_LABELS,
    HEAT,
    IDLE,
    NVLINK,
    PCIE,
    Column,
    DcgmName,
    Family,
    Table,
)


def _gauge(name: str, help_text: str, unit: str, feeds: str) -> Family:
    return Family(f"aiops_gpu_{name}", help_text, unit, feeds)


_ECC = Family(
    "aiops_gpu_ecc_errors_total",
    "ECC errors (volatile)",
    "errors",
    "gpu_samples.ecc_sbe_total, ecc_dbe_total: `gpu_rules` (ecc_dbe), `Facts.gpu_changes`",
    (*GPU_LABELS, "type"),
    per_gpu="2",
)
_NVLINK = Family(
    "aiops_gpu_nvlink_errors_total",
    "NVLink errors",
    "errors",
    "gpu_samples.nvlink_crc_total, nvlink_replay_total: `gpu_rules` (nvlink_errors)",
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
            dcgm=(DcgmName("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", True),),
        ),
        Column(
            "mem_util_pct",
            _F,
            fleet=False,
            reacts_to=ANY,
            observed_by="nvmlDeviceGetUtilizationRates",
            dcgm=(DcgmName("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", True),),
        ),
        Column(
            "sm_clock_mhz",
            _F,
            _gauge("sm_clock_hertz", "SM clock", "hertz", "gpu_samples.sm_clock_mhz: `Facts.around_onset`"),
            scale=1e6,
            reacts_to=CAPS | HEAT,
            observed_by="nvmlDeviceGetClockInfo(NVML_CLOCK_SM): lower under a cap or heat",
            dcgm=(DcgmName("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", True),),
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
            dcgm=(DcgmName("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "Maximum SM clock (in MHz)."),),
        ),
        Column(
            "mem_clock_mhz",
            _F,
            fleet=False,
            dcgm=(DcgmName("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", True),),
        ),
        Column(
            "power_w",
            _F,
            _gauge(
                "power_watts",
                "GPU power draw (nvmlDeviceGetPowerUsage)",
                "watts",
                "gpu_samples.power_w: `Facts.around_onset`, `Facts.gpu_changes` (heat against node peers)",
            ),
            reacts_to=ANY,
            observed_by="nvmlDeviceGetPowerUsage (follows the work the GPU does)",
            dcgm=(DcgmName("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", True),),
        ),
        Column(
            "power_limit_w",
            _F,
            _gauge(
                "power_limit_watts",
                "enforced power limit (nvmlDeviceGetEnforcedPowerLimit)",
                "watts",
                "gpu_samples.power_limit_w: `gpu_rules` (power_limit_drop, routine cap), `Facts.gpu_changes`",
            ),
            reacts_to=frozenset({"power_cap_misconfig", "facility_power_cap"}),
            observed_by="nvmlDeviceGetEnforcedPowerLimit: the limit a misconfiguration or the facility's cap set",
            dcgm=(DcgmName("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W)."),),
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
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN", "gauge", "Power management limit minimum (in W)."
                ),
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
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX", "gauge", "Power management limit maximum (in W)."
                ),
            ),
        ),
        Column(
            "temp_c",
            _F,
            _gauge(
                "temperature_celsius",
                "GPU die temperature (nvmlDeviceGetTemperature)",
                "celsius",
                "gpu_samples.temp_c: `gpu_rules` (gpu_hot), `Facts.gpu_changes`, `Facts.throttled`",
            ),
            reacts_to=ANY,
            observed_by="nvmlDeviceGetTemperature (follows the GPU's power and its coolant)",
            dcgm=(DcgmName("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", True),),
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
            dcgm=(DcgmName("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", True),),
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
            dcgm=(DcgmName("DCGM_FI_DEV_SLOWDOWN_TEMP", "gauge", "Slowdown temperature (in C)."),),
        ),
        Column(  # hand-written: aiops_gpu_clocks_event_reason, aiops_gpu_clocks_event_samples_total
            "clocks_event_reasons",
            _U64,
            reacts_to=CAPS | HEAT | IDLE,
            observed_by="nvmlDeviceGetCurrentClocksEventReasons: SwPowerCap / HW slowdown bits while the cap or "
            "brake holds, the thermal bits while the GPU is hot, GpuIdle while its job waits",
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                    "gauge",
                    "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
                ),
                DcgmName(
                    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                    "gauge",
                    "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
                ),
            ),
        ),
        Column(
            "ecc_sbe_total",
            _I64,
            _ECC,
            fixed=(("type", "corrected"),),
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
                    "counter",
                    "Total number of single-bit volatile ECC errors.",
                ),
            ),
        ),
        Column(
            "ecc_dbe_total",
            _I64,
            _ECC,
            fixed=(("type", "uncorrected"),),
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                    "counter",
                    "Total number of double-bit volatile ECC errors.",
                ),
            ),
        ),
        Column(
            "pcie_replay_total",
            _I64,
            Family(
                "aiops_gpu_pcie_replays_total",
                "PCIe replay counter",
                "replays",
                "gpu_samples.pcie_replay_total: `gpu_rules` (pcie_replay)",
            ),
            reacts_to=PCIE,
            observed_by="nvmlDeviceGetPcieReplayCounter",
            dcgm=(
                DcgmName("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", True),
            ),
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
            dcgm=(DcgmName("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe current link generation."),),
        ),
        Column(
            "pcie_link_width",
            _I32,
            _gauge(
                "pcie_link_width_lanes",
                "current PCIe link width",
                "lanes",
                "gpu_samples.pcie_link_width: `gpu_rules` (pcie_downtrain)",
            ),
            reacts_to=PCIE,
            observed_by="nvmlDeviceGetCurrPcieLinkWidth",
            dcgm=(DcgmName("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe current link width."),),
        ),
        Column(
            "pcie_link_max_width",
            _I32,
            _gauge(
                "pcie_link_width_max_lanes",
                "maximum PCIe link width",
                "lanes",
                "gpu_samples.pcie_link_max_width: `gpu_rules` (pcie_downtrain)",
            ),
            dcgm=(DcgmName("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "gauge", "PCIe maximum link width."),),
        ),
        Column(
            "nvlink_crc_total",
            _I64,
            _NVLINK,
            fixed=(("type", "crc"),),
            reacts_to=NVLINK,
            observed_by="nvmlDeviceGetNvLinkErrorCounter (CRC)",
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
                    "counter",
                    "Total number of NVLink flow-control CRC errors.",
                ),
            ),
        ),
        Column(
            "nvlink_replay_total",
            _I64,
            _NVLINK,
            fixed=(("type", "replay"),),
            reacts_to=NVLINK,
            observed_by="nvmlDeviceGetNvLinkErrorCounter (replay)",
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
                    "counter",
                    "Total number of NVLink retries.",
                ),
            ),
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
            dcgm=(
                DcgmName(
                    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                    "counter",
                    "Number of remapped rows for uncorrectable errors",
                ),
            ),
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
            "GPU_WINDOW_SQL.throttled: `gpu_rules` (gpu_throttle: ≥ 2 and ≥ 30 % of a window's samples)",
        ),
        Family(
            "aiops_gpu_nvml_error_samples_total",
            "samples NVML answered with an error",
            "samples",
            "count(nvml_error): `gpu_rules` (gpu_lost), `Facts.gpu_changes`",
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
