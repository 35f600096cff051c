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


# declared with their gpu_samples columns (aiops/columns.py)
DCGM_FIELDS: tuple[DcgmField, ...] = tuple(
    DcgmField(d.name, c.name, d.kind, d.help_text, d.default)
    for c in dcgm_columns(GPU_SAMPLES)
    for d in c.dcgm
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
