"""Every symptom kind the detection rules (aiops/detect/rules.py) report: the detect layer's registry of the
words a label's spec anchors on (`LabelSpec.anchors`, aiops/labels.py). tests/test_label_units.py checks that
the rules report exactly these kinds and that every label's anchors are among them.
"""

from __future__ import annotations

GPU_KINDS = frozenset(
    {"gpu_lost", "gpu_throttle", "ecc_dbe", "pcie_replay", "pcie_downtrain", "nvlink_errors", "xid"}
    | {"power_limit_drop", "gpu_hot", "gpu_idle_in_job"}
)
NIC_KINDS = frozenset(
    {"loss_without_ecn", "carrier_flap", "lane_enforcement_missing", "nic_drops", "queue_delay", "pfc_pauses"}
    | {"lane_mismatch"}
)
JOB_KINDS = frozenset({"collective_timeouts", "collective_latency", "step_regression", "job_stalled"})
FACILITY_KINDS = frozenset({"dcim_power_cap", "coolant_flow_drop", "rack_inlet_hot", "fleet_inlet_drift"})
HOST_KINDS = frozenset({"loader_outlier", "loader_stall"})
# from per-rank timing (aiops/detect/stragglers.py): late ranks on a GPU or node, slow collectives behind a NIC
RANK_KINDS = frozenset({"rank_straggler", "network_straggler"})
# a trend before a hard fault (aiops/detect/early_watch.py): an incident of its own, never grouped with others
WARNING_KINDS = frozenset({"early_warning"})
SYMPTOM_KINDS: frozenset[str] = (
    GPU_KINDS | NIC_KINDS | JOB_KINDS | FACILITY_KINDS | HOST_KINDS | RANK_KINDS | WARNING_KINDS
)
# Kinds of rules that need a baseline or several windows: reported a while after the fault began (the others,
# counters, reasons, signals, are dated at their onset; aiops/detect/incidents.py lets only these come late)
PERSISTENT = frozenset(
    {"gpu_hot", "gpu_idle_in_job", "loss_without_ecn", "nic_drops", "queue_delay", "pfc_pauses"}
    | {"collective_latency", "step_regression", "coolant_flow_drop", "rack_inlet_hot", "fleet_inlet_drift"}
    | {"loader_outlier", "loader_stall", "rank_straggler", "network_straggler"}
)
