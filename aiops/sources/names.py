"""The series names and labels read and written, as dcgm-exporter and node_exporter spell them.

dcgm-exporter: the metric is the DCGM field name (`etc/default-counters.csv` of NVIDIA/dcgm-exporter: `DCGM FIELD,
Prometheus metric type, help message`); every series carries `gpu` (the DCGM/NVML index), `UUID`, `pci_bus_id`,
`device` (`nvidia<N>`), `modelName`, `Hostname` and `DCGM_FI_DRIVER_VERSION`. Fields marked optional below are
not in default-counters.csv but are DCGM fields an operator enables with a custom counters CSV
(`-f counters.csv`); the analyst uses them when present. node_exporter's netdev collector: `device` per
interface, `instance` from the scrape target.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiops.columns import GPU_SAMPLES, dcgm_columns


@dataclass(frozen=True)
class DcgmField:
    name: str  # the metric name (the DCGM field)
    column: str  # the gpu_samples column it maps to
    kind: str  # gauge | counter, as dcgm-exporter declares it
    help_text: str
    default: bool  # in dcgm-exporter's default-counters.csv


_LISTED: tuple[DcgmField, ...] = (  # not migrated to aiops/columns.py yet
    DcgmField("DCGM_FI_DEV_SM_CLOCK", "sm_clock_mhz", "gauge", "SM clock frequency (in MHz).", True),
    DcgmField("DCGM_FI_DEV_MEM_CLOCK", "mem_clock_mhz", "gauge", "Memory clock frequency (in MHz).", True),
    DcgmField("DCGM_FI_DEV_MEMORY_TEMP", "mem_temp_c", "gauge", "Memory temperature (in C).", True),
    DcgmField("DCGM_FI_DEV_GPU_TEMP", "temp_c", "gauge", "GPU temperature (in C).", True),
    DcgmField("DCGM_FI_DEV_POWER_USAGE", "power_w", "gauge", "Power draw (in W).", True),
    DcgmField("DCGM_FI_DEV_GPU_UTIL", "util_pct", "gauge", "GPU utilization (in %).", True),
    DcgmField("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_util_pct", "gauge", "Memory utilization (in %).", True),
    DcgmField(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "pcie_replay_total",
        "counter",
        "Total number of PCIe retries.",
        True,
    ),
    DcgmField(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT", "power_limit_w", "gauge", "Power management limit (in W).", False
    ),
    DcgmField(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_MIN",
        "power_limit_min_w",
        "gauge",
        "Power management limit minimum (in W).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT_MAX",
        "power_limit_max_w",
        "gauge",
        "Power management limit maximum (in W).",
        False,
    ),
    DcgmField("DCGM_FI_DEV_MAX_SM_CLOCK", "max_sm_clock_mhz", "gauge", "Maximum SM clock (in MHz).", False),
    DcgmField("DCGM_FI_DEV_SLOWDOWN_TEMP", "slowdown_temp_c", "gauge", "Slowdown temperature (in C).", False),
    DcgmField(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "clocks_event_reasons",
        "gauge",
        "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "clocks_event_reasons",
        "gauge",
        "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "ecc_sbe_total",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "ecc_dbe_total",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "nvlink_crc_total",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        False,
    ),
    DcgmField(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "nvlink_replay_total",
        "counter",
        "Total number of NVLink retries.",
        False,
    ),
    DcgmField("DCGM_FI_DEV_PCIE_LINK_GEN", "pcie_link_gen", "gauge", "PCIe current link generation.", False),
    DcgmField("DCGM_FI_DEV_PCIE_LINK_WIDTH", "pcie_link_width", "gauge", "PCIe current link width.", False),
    DcgmField(
        "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "pcie_link_max_width", "gauge", "PCIe maximum link width.", False
    ),
)
DCGM_FIELDS: tuple[DcgmField, ...] = (
    *_LISTED,
    *(
        DcgmField(d.name, c.name, d.kind, d.help_text, d.default)
        for c in dcgm_columns(GPU_SAMPLES)
        if (d := c.dcgm) is not None
    ),
)
XID = "DCGM_FI_DEV_XID_ERRORS"  # gauge: "Value of the last XID error encountered." (default-counters.csv)
XID_HELP = "Value of the last XID error encountered."
# Both names of the clocks-event bitmask: DCGM 3.3 renamed CLOCK_THROTTLE_REASONS to CLOCKS_EVENT_REASONS and
# dcgm-exporter serves whichever its DCGM knows; the reader takes either (the newer one when both exist).
CLOCKS_EVENT_NAMES = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")


@dataclass(frozen=True)
class NetdevSeries:
    name: str  # node_exporter's metric
    column: str  # the nic_samples column its per-interval delta feeds ("" for a gauge read as is)
    kind: str
    help_text: str


NETDEV_SERIES: tuple[NetdevSeries, ...] = (
    NetdevSeries(
        "node_network_transmit_bytes_total", "tx_bytes", "counter", "Network device statistic transmit_bytes."
    ),
    NetdevSeries(
        "node_network_transmit_packets_total",
        "tx_packets",
        "counter",
        "Network device statistic transmit_packets.",
    ),
    NetdevSeries(
        "node_network_transmit_drop_total", "drops", "counter", "Network device statistic transmit_drop."
    ),
    NetdevSeries(
        "node_network_receive_drop_total", "drops", "counter", "Network device statistic receive_drop."
    ),
    NetdevSeries(
        "node_network_carrier_changes_total",
        "carrier_changes",
        "counter",
        "Network device property: carrier_changes_total",
    ),
    NetdevSeries("node_network_up", "link_up", "gauge", "Value is 1 if operstate is 'up', 0 otherwise."),
)
