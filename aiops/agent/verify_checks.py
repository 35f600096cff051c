"""How the agent re-checks an LLM's claim of each label against a telemetry row (aiops/agent/verify.py): the
agent layer's registry of labels, `SUPPORT`, filled by `@supports(label, what)` on each check (derived from the
analyst's own facts and thresholds in aiops/rca). Every diagnosis label has exactly one check; an
evidence-only label's (its spec's `telemetry_check` is False, aiops/labels.py) passes no row.
tests/test_label_units.py checks the registry against the labels' specs; docs/AGENT.md prints the table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from aiops.nvml_bits import GPU_IDLE, HW_POWER_BRAKE_SLOWDOWN, THERMAL

Row = dict[str, Any]
Check = Callable[[Row], bool]

# label -> (what a supporting row shows, the check)
SUPPORT: dict[str, tuple[str, Check]] = {}


def supports(label: str, what: str) -> Callable[[Check], Check]:
    """Register `check` as the re-check of `label` (one per label)."""

    def register(check: Check) -> Check:
        if label in SUPPORT:
            raise ValueError(f"aiops/agent/verify_checks.py: label {label!r} has two checks")
        SUPPORT[label] = (what, check)
        return check

    return register


# XID groups, as the analyst reads them (aiops/rca/gpu_scorers.py)
ECC_XIDS = frozenset({48, 63, 64, 94, 95})  # not 92: a high corrected-error rate, a warning (Xid catalogue)
APP_XIDS = frozenset({13, 31, 43, 45, 68})
NVLINK_XIDS = frozenset({74})
OFF_BUS_XIDS = frozenset({79})


def _num(row: Row, *names: str) -> float | None:
    """The first of `names` the row has as a finite number."""
    for name in names:
        value = row.get(name)
        if isinstance(value, bool) or value is None:
            continue
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            continue
        if math.isfinite(number):
            return number
    return None


def _bits(row: Row, mask: int) -> bool:
    value = _num(row, "clocks_event_reasons", "reasons")
    return value is not None and 0 <= value < 2**64 and int(value) & mask != 0


def _above(row: Row, value_names: tuple[str, ...], ref_names: tuple[str, ...], margin: float) -> bool:
    value, ref = _num(row, *value_names), _num(row, *ref_names)
    return value is not None and ref is not None and value - ref >= margin


def _xid_in(row: Row, codes: frozenset[int]) -> bool:
    value = _num(row, "xid")
    return value is not None and int(value) in codes


def _positive(row: Row, *names: str) -> bool:
    value = _num(row, *names)
    return value is not None and value > 0


@supports(
    "thermal_throttle",
    "temp_c/max_temp_c >= slowdown_temp_c, a thermal clocks-event bit, thermal_samples > 0",
)
def _thermal(row: Row) -> bool:
    temp, slowdown = _num(row, "max_temp_c", "temp_c"), _num(row, "slowdown_temp_c")
    hot = temp is not None and slowdown is not None and temp >= slowdown
    return hot or _bits(row, THERMAL) or _positive(row, "thermal_samples")


@supports(
    "rack_cooling_failure", "min_flow_lpm < 0.85 ref_flow_lpm, or inlet (max_inlet_c) >= ref_inlet_c + 3"
)
def _cooling(row: Row) -> bool:
    flow, ref_flow = _num(row, "min_flow_lpm", "coolant_flow_lpm"), _num(row, "ref_flow_lpm")
    low_flow = flow is not None and ref_flow is not None and ref_flow > 0 and flow < 0.85 * ref_flow
    return low_flow or _above(row, ("max_inlet_c", "inlet_temp_c", "inlet_c"), ("ref_inlet_c",), 3.0)


@supports(
    "power_cap_misconfig", "power_limit_w/limit_w < 0.85 x the default (ref_limit_w or power_limit_max_w)"
)
def _power_cap(row: Row) -> bool:
    limit = _num(row, "limit_w", "power_limit_w")
    default = max(
        (v for v in (_num(row, "ref_limit_w"), _num(row, "power_limit_max_w", "max_limit_w")) if v),
        default=0.0,
    )
    return limit is not None and default > 0 and limit < 0.85 * default


@supports(
    "gpu_ecc_error", "ecc_dbe_total/dbe above its reference, or an uncorrectable ECC XID (48, 63, 64, 94, 95)"
)
def _ecc(row: Row) -> bool:
    dbe = _num(row, "dbe", "ecc_dbe_total")
    ref = _num(row, "ref_dbe", "first_dbe")
    grew = dbe is not None and (dbe > ref if ref is not None else dbe > 0)
    return grew or _xid_in(row, ECC_XIDS)


@supports("gpu_fell_off_bus", "XID 79, or an nvml_error other than a node-wide TIMEOUT (nvml_errors > 0)")
def _off_bus(row: Row) -> bool:
    error = row.get("nvml_error")
    if isinstance(error, str) and error.upper() == "TIMEOUT":  # a node-wide NVML hang: every GPU of the node
        return _xid_in(row, OFF_BUS_XIDS)
    return (
        _xid_in(row, OFF_BUS_XIDS)
        or (isinstance(error, str) and bool(error))
        or _positive(row, "nvml_errors")
    )


@supports("nvlink_degraded", "NVLink CRC/replay +5 over reference, nonzero counters, or XID 74")
def _nvlink(row: Row) -> bool:
    grew = _above(row, ("nvlink",), ("ref_nvlink", "first_nvlink"), 5.0)
    return grew or _xid_in(row, NVLINK_XIDS) or _positive(row, "nvlink_crc_total", "nvlink_replay_total")


@supports("pcie_degraded", "pcie_link_width < pcie_link_max_width, or PCIe replays +10 over reference")
def _pcie(row: Row) -> bool:
    width, max_width = _num(row, "width", "pcie_link_width"), _num(row, "max_width", "pcie_link_max_width")
    narrowed = width is not None and max_width is not None and width < max_width
    return narrowed or _above(row, ("replay", "pcie_replay_total"), ("ref_replay", "first_replay"), 10.0)


@supports("bulk_traffic_contention", "bulk traffic_class bytes, or queue_ms >= 2 x ref_queue_ms")
def _bulk(row: Row) -> bool:
    bulk_bytes = row.get("traffic_class") == "bulk" and _positive(row, "tx_bytes")
    queued = _num(row, "queue_ms", "queue_delay_ms"), _num(row, "ref_queue_ms")
    slow = queued[0] is not None and queued[1] is not None and queued[0] >= 2.0 * max(queued[1], 0.1)
    return bulk_bytes or slow


@supports("lane_misclassification", "collective bytes in the bulk/standard lane, or bulk bytes in vip")
def _lane(row: Row) -> bool:
    cls, lane = row.get("traffic_class"), row.get("lane")
    wrong = (cls == "collective" and lane in ("bulk", "standard")) or (cls == "bulk" and lane == "vip")
    return wrong and _positive(row, "tx_bytes")


@supports("nic_link_flap", "carrier_changes > 0, or link_up false")
def _flap(row: Row) -> bool:
    return _positive(row, "carrier_changes") or row.get("link_up") is False


@supports(
    "ecn_misconfig",
    "drops/retransmits/loss with ce_marks (or ce_per_s) = 0, or out_of_sequence (oos_per_s) with np_cnp_sent (cnp_sent_per_s) = 0",
)
def _ecn(row: Row) -> bool:
    """Host view: losses without CE marks; RoCE HCA view (rca/rdma_scorers.py): packets out of sequence while the
    NIC sends no CNPs (a delta or a rate: a cumulative total is not 0 once the NIC ever sent one)."""
    lossy = _positive(row, "drops") or _positive(row, "retransmits") or _positive(row, "loss_per_s")
    ce = _num(row, "ce_marks", "ce_per_s")
    host = lossy and ce is not None and ce == 0
    out_of_order = _positive(row, "out_of_sequence") or _positive(row, "oos_per_s")
    cnp = _num(row, "np_cnp_sent", "cnp_sent_per_s")
    return host or (out_of_order and cnp is not None and cnp == 0)


@supports("input_pipeline_bottleneck", "loader_ms > max(3 x ref, ref + 50), GpuIdle bit, idle_samples >= 3")
def _loader(row: Row) -> bool:
    loader, ref = _num(row, "loader_ms", "loader_wait_ms"), _num(row, "ref_loader_ms")
    high = loader is not None and ref is not None and loader > max(3.0 * ref, ref + 50.0)
    idle = _bits(row, GPU_IDLE) or (_num(row, "idle_samples") or 0) >= 3
    return high or idle


@supports("application_error", "an application XID (13, 31, 43, 45, 68)")
def _app(row: Row) -> bool:
    return _xid_in(row, APP_XIDS)


@supports("power_brake", "HwPowerBrakeSlowdown bit (0x80), or brake_samples > 0")
def _brake(row: Row) -> bool:
    return _bits(row, HW_POWER_BRAKE_SLOWDOWN) or _positive(row, "brake_samples")


@supports(
    "facility_power_cap", "a facility cap in force (power_cap_kw > 0: the DCIM signal input, dcim_signals)"
)
def _facility(row: Row) -> bool:
    return _positive(row, "power_cap_kw")


@supports("ambient_drift", "inlet_c >= ref_inlet_c + 1")
def _drift(row: Row) -> bool:
    return _above(row, ("inlet_c", "inlet_temp_c"), ("ref_inlet_c",), 1.0)


@supports("gpu_driver_firmware_fault", "nothing in telemetry: evidence files only")
@supports("roce_config_error", "nothing in telemetry: evidence files only")
def _nothing(row: Row) -> bool:
    return False
