"""What a real source reports while a fault lasts: the columns tests/twin/test_twin_leaks.py lets carry
information about a fault, each with the fault kinds it may react to and the source that reports it on a real
cluster (docs/SIMULATOR.md, "What is observable, and by whom"). `<rows>` is a table's row rate, `<entities>` the
entities (keys) a table has only while the fault lasts (allowed too where its `<rows>` is).
"""

from __future__ import annotations

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
    leak_allowances,
)

TWIN_TABLES = frozenset(
    {"sim_runs", "twin_log"}
)  # the twin's own: the scenario it ran (faults included), its log
FLAP = frozenset({"nic_link_flap"})
XIDS = frozenset({"gpu_ecc_error", "gpu_fell_off_bus", "application_error", "nvlink_degraded"})


OBSERVED: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    **leak_allowances(GPU_SAMPLES),  # gpu_samples: declared with its columns (aiops/columns.py)
    ("gpu_events", "<rows>"): (XIDS, "NVML's event set (nvmlEventSetWait: Xid 13/31/43, 48/63/94, 74, 79)"),
    ("collector_errors", "<rows>"): (
        frozenset({"gpu_fell_off_bus"}),
        "the NVML collector records each read that fails (NVML_ERROR_GPU_IS_LOST, NVML_ERROR_TIMEOUT)",
    ),
    **leak_allowances(HOST_SAMPLES),  # host_samples, nic_samples, netdev_samples: declared with their columns
    **leak_allowances(NIC_SAMPLES),
    **leak_allowances(NETDEV_SAMPLES),
    **leak_allowances(FLOW_CLASS_SAMPLES),
    **leak_allowances(IB_PORT_SAMPLES),
    **leak_allowances(COLLECTIVE_SAMPLES),
    **leak_allowances(RANK_TIMING_SAMPLES),
    **leak_allowances(JOB_STEPS),
    **leak_allowances(RACK_SAMPLES),
    **leak_allowances(PSI_SAMPLES),
    **leak_allowances(THERMAL_ZONE_SAMPLES),
    **leak_allowances(HWMON_SAMPLES),
    **leak_allowances(COOLING_DEVICE_SAMPLES),
    **leak_allowances(POWERCAP_SAMPLES),
    ("lane_rules", "<entities>"): (
        frozenset({"lane_misclassification"}),
        "the lane rules the datapath holds (aiops lanes): a rule sending a class into the wrong lane is the "
        "misclassification itself",
    ),
    ("log_events", "<rows>"): (
        FLAP,
        "the rank's NCCL log: 'NET/IB : Got completion from peer ... with status=12' (IBV_WC_RETRY_EXC_ERR)",
    ),
}

# A GPU off the bus answers no NVML query: every field of its samples is null (NVML_ERROR_GPU_IS_LOST)
LOST_GPU = ("gpu_samples", "is null more or less often", frozenset({"gpu_fell_off_bus"}))
