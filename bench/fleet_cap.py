"""A site-wide DCIM cap in bench/fleet_exports.py's synthetic cluster (bench/fleet.py `--all-at-once`): what
every shard sees when the facility caps the whole site, so that "a fleet-wide condition is named once" is tested
with every shard.

The facility exporters' rack series (docs/FACILITY.md: ipmi_exporter's inlet sensor and DCMI power, a rack
controller's return water through snmp_exporter, a CDU's coolant flow through json_exporter), one set per rack,
each with its rack's `shard` label; and from `cap_ts_s` on, as the twin's `facility_power_cap` does it
(aiops/sim/calibrate_hw.py: the scope's budget becomes a ceiling on every GPU's power limit), every GPU's limit is
lowered to `CAP_LIMIT_W`, its power and SM clock follow, and its clocks-event reason `SwPowerCap` is set in every
sample. The DCIM document that asks for the cap (`document`) is served to the shards from the start, as a DCIM
asks before the limits come down (tests/fleet/test_fleet_shards_view.py does the same)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

CAP_LIMIT_W = 560.0  # every GPU's power limit under the cap (700 W before)
CAPPED_POWER_W = (540.0, 558.0)  # the draw under it (uniform in this range)
CAPPED_SM_CLOCK_HZ = 1_755_000_000  # SM clock under SwPowerCap (1,980 MHz before)
HOST_KW = 1.5  # a node's own draw besides its GPUs
RACK_SERIES = (  # (metric, instance suffix, extra labels, value before the cap)
    ("ipmi_temperature_celsius", "inlet", 'name="Inlet Temp",', 24.0),
    ("cpqRackThermalControllerWaterTempReturn", "outlet", "", 31.0),
    ("redfish_cdu_coolant_flow_liters_per_minute", "coolant", "", 120.0),
)
SW_POWER_CAP = 'reason="SwPowerCap"'  # the clocks-event reason a cap sets


def document(racks: int, nodes_per_rack: int, gpus_per_node: int) -> dict[str, dict[str, Any]]:
    """The DCIM document of the site's cap: the fleet's budget, what its racks draw under it."""
    rack_kw = nodes_per_rack * (gpus_per_node * CAP_LIMIT_W / 1000 + HOST_KW)
    return {"fleet": {"kw": round(racks * rack_kw, 1)}}


def add_site_cap(
    out: Any, cap_ts_s: float, racks: list[tuple[str, str]], gpus_per_rack: int, nodes_per_rack: int
) -> None:
    """`out` (bench.fleet_exports.Exports) with the site's cap from `cap_ts_s` on and every rack's facility
    series; `racks`: (rack name, its shard's label text: `,shard="K"` or "")."""
    from bench.fleet_exports import Varying

    k_cap = round((cap_ts_s - out.start_s) / out.step_s)
    per_scrape = round(out.step_s)  # the node agent samples NVML at 1 Hz

    def capped(k: int) -> bool:
        return k >= k_cap

    kept: list[str] = []
    limits: list[str] = []
    reasons: list[str] = []
    counted: list[str] = []  # SwPowerCap samples and throttled samples: + a scrape's samples under the cap
    for line in out.constant:
        prefix = line.rsplit(" ", 1)[0] + " "
        if line.startswith("aiops_gpu_power_limit_watts{"):
            limits.append(prefix)
        elif line.startswith("aiops_gpu_clocks_event_reason{") and SW_POWER_CAP in line:
            reasons.append(prefix)
        elif line.startswith("aiops_gpu_throttled_samples_total{") or (
            line.startswith("aiops_gpu_clocks_event_samples_total{") and SW_POWER_CAP in line
        ):
            counted.append(prefix)
        else:
            kept.append(line)
    out.constant = kept
    out.varying.append(Varying(limits, lambda k: np.full(len(limits), CAP_LIMIT_W if capped(k) else 700.0)))
    out.varying.append(Varying(reasons, lambda k: np.full(len(reasons), 1 if capped(k) else 0)))
    out.varying.append(Varying(counted, lambda k: np.full(len(counted), max(0, k - k_cap + 1) * per_scrape)))
    for group in out.varying:
        name = group.prefixes[0].split("{", 1)[0] if group.prefixes else ""
        if name == "aiops_gpu_power_watts":
            group.values = _under_cap(group.values, capped, _capped_power)
        elif name == "aiops_gpu_sm_clock_hertz":
            group.values = _under_cap(group.values, capped, lambda k, n: np.full(n, CAPPED_SM_CLOCK_HZ))
    for rack, shard in racks:
        for metric, suffix, extra, value in RACK_SERIES:
            out.constant.append(
                f'{metric}{{{extra}instance="{rack}-{suffix}"{shard},rack="{rack}"}} {value:g}'
            )
    power = [f'ipmi_dcmi_power_consumption_watts{{instance="{r}-power"{s},rack="{r}"}} ' for r, s in racks]
    before_w = nodes_per_rack * HOST_KW * 1000 + gpus_per_rack * 665.0
    after_w = nodes_per_rack * HOST_KW * 1000 + gpus_per_rack * sum(CAPPED_POWER_W) / 2
    out.varying.append(
        Varying(power, lambda k: np.full(len(power), after_w if capped(k) else before_w), integer=False)
    )


def _capped_power(k: int, n: int) -> np.ndarray:
    low, high = CAPPED_POWER_W
    return low + np.random.default_rng(7_000 + k).random(n) * (high - low)


def _under_cap(
    before: Callable[[int], np.ndarray],
    capped: Callable[[int], bool],
    after: Callable[[int, int], np.ndarray],
) -> Callable[[int], np.ndarray]:
    def values(k: int) -> np.ndarray:
        now = before(k)
        return after(k, len(now)) if capped(k) else now

    return values
