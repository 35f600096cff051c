"""GPU rules: Xids, kernel PCIe/GSP messages, nvidia-smi and dcgm readings -> hypotheses (sources: rules.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.evidence.hyp import Hyp, Namer, anchored, by, hyp, merge, per_component

HW_XIDS = frozenset(
    {
        48,
        61,
        62,
        63,
        64,
        74,
        79,
        92,
        94,
        95,
        119,
        120,
        136,
        137,
        140,
        143,
        144,
        145,
        146,
        147,
        148,
        149,
        150,
        154,
    }
)
ECC_XIDS = {48: 0.9, 94: 0.85, 95: 0.9, 63: 0.7, 64: 0.75}
# Xid 92 "High single-bit ECC error rate": corrected errors, a warning to watch; evidence for no uncorrectable
# error and no hypothesis (rules.watch_items lists it; aiops/agent/verify.py reads it the same way).
ECC_RATE_WARNING_XID = 92
NVLINK_XIDS = frozenset({74, 137, 145})
FIRMWARE_XIDS = frozenset({119, 120})
APP_XIDS = frozenset({13, 31, 43, 45})


def _xids(c: Collected, codes: Iterable[int]) -> list[LogEvent]:
    wanted = set(codes)
    return [e for e in c.of("xid") if e.code in wanted]


def fell_off_bus(c: Collected, n: Namer) -> list[Hyp]:
    lost = _xids(c, {79}) + c.of("fell_off_bus")
    surprise = c.of("aer_surprise_down")
    if lost:
        return per_component(
            lost,
            n.gpu,
            "gpu_fell_off_bus",
            0.95 if surprise else 0.93,
            "the GPU stopped answering on PCIe (Xid 79 / 'fallen off the bus')",
            "GPU has fallen off the bus",
            ("PCIe AER Surprise Down on the GPU's upstream port", surprise),
        )
    return anchored(
        surprise,
        n.node,
        "gpu_fell_off_bus",
        0.55,
        "a PCIe link went down unexpectedly (AER Surprise Down); no GPU-side message ties it to a GPU",
        "PCIe AER Surprise Down",
    )


def ecc(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    for code, conf in ECC_XIDS.items():
        out += per_component(
            _xids(c, {code}),
            n.gpu,
            "gpu_ecc_error",
            conf,
            f"Xid {code}: uncorrectable memory error / page retirement",
            f"Xid {code}",
        )
    readings: list[tuple[str, Callable[[LogEvent], bool], float, str]] = [
        ("remap_pending", lambda e: e.code == 1, 0.85, "remapped rows pending (a reset is needed to remap)"),
        ("remap_failure", lambda e: e.code == 1, 0.9, "row remapping failed"),
        ("retire_pending", lambda e: e.code == 1, 0.75, "retired pages pending"),
        ("ecc_uncorrectable", lambda e: (e.value or 0) > 0, 0.85, "volatile uncorrectable ECC errors"),
        ("cuda_ecc_uncorrectable", lambda e: True, 0.75, "CUDA reported an uncorrectable ECC error"),
    ]
    behind_remaps = [e for e in c.of("remap_uncorrectable") if (e.value or 0) > 0]
    for kind, test, conf, summary in readings:
        out += per_component(
            [e for e in c.of(kind) if test(e)],
            n.gpu,
            "gpu_ecc_error",
            conf,
            summary,
            summary,
            ("uncorrectable errors behind remapped rows", behind_remaps),
        )
    return merge(out)


def nvlink(c: Collected, n: Namer) -> list[Hyp]:
    out = per_component(
        _xids(c, NVLINK_XIDS), n.gpu, "nvlink_degraded", 0.85, "NVLink error Xids (74/137/145)", "NVLink Xid"
    )
    if not out:
        referenced = [
            e
            for e in c.of("xid")
            if e.detail.get("caused_by_xid", "").isascii()
            and e.detail.get("caused_by_xid", "").isdigit()
            and int(e.detail["caused_by_xid"]) in NVLINK_XIDS | {144, 146, 147, 148, 149, 150}
        ]
        out += anchored(
            referenced,
            n.gpu,
            "nvlink_degraded",
            0.4,
            "Xid 45 cleanups name an earlier NVLink Xid that is not in the evidence: look for it",
            "cleanup caused by a previous NVLink Xid",
        )
        crc = [e for e in c.of("nvlink_crc") if (e.value or 0) > 0]
        out += anchored(
            crc,
            n.gpu,
            "nvlink_degraded",
            0.45,
            "NVLink CRC flit errors counted",
            "DCGM NVLink CRC flit errors",
        )
    return merge(out)


def firmware(c: Collected, n: Namer) -> list[Hyp]:
    gsp = c.of("gsp_timeout") + c.of("gsp_error")
    firmware_xids = _xids(c, FIRMWARE_XIDS)
    recovery = _xids(c, {154})
    if firmware_xids or gsp:
        anchor = (firmware_xids or recovery or gsp)[0]
        conf = 0.9 if firmware_xids else (0.85 if recovery else 0.75)
        return [
            hyp(
                "gpu_driver_firmware_fault",
                n.gpu(anchor),
                conf,
                "the GPU's GSP firmware timed out or failed (Xid 119/120, GSP heartbeat/RPC timeouts)",
                ("GSP timeout / GSP error Xid", firmware_xids),
                ("GSP messages", gsp),
                ("recovery action required (Xid 154)", recovery),
            )
        ]
    return anchored(
        recovery,
        n.gpu,
        "gpu_driver_firmware_fault",
        0.45,
        "Xid 154 says the GPU needs a reset; the failure that led to it is not in the evidence",
        "recovery action required (Xid 154)",
    )


def application(c: Collected, n: Namer) -> list[Hyp]:
    app = [e for e in _xids(c, APP_XIDS) if "caused_by_xid" not in e.detail]
    if not app:
        return []
    hardware = _xids(c, HW_XIDS) + c.of("fell_off_bus") + c.of("gsp_timeout") + c.of("aer_surprise_down")
    if hardware:
        return []  # Xid 13/31/43/45 next to hardware Xids are consequences, not an application's fault
    codes = {e.code for e in app if e.code is not None}
    return per_component(
        app,
        n.gpu,
        "application_error",
        0.65 if codes & {13, 31} else 0.6,
        f"application-class Xids {sorted(codes)} with no hardware Xid: the program's fault is most likely",
        "application-class Xid",
    )


def pcie(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    caps = {e.component: e for e in c.of("pcie_link_cap")}
    for sta in c.of("pcie_link_sta"):
        cap = caps.get(sta.component)
        width_down = sta.detail.get("width_downgraded") == "True" or (
            cap is not None and int(sta.detail["width"]) < int(cap.detail["width"])
        )
        speed_down = sta.detail.get("speed_downgraded") == "True" or (
            cap is not None and (sta.value or 0) < (cap.value or 0)
        )
        if width_down:
            conf, summary = 0.7, "the PCIe link trained narrower than its capability"
        elif speed_down:
            conf, summary = (
                0.3,
                "the PCIe link runs below its maximum speed; an idle GPU does this to save power, so this "
                "means something only under load",
            )
        else:
            continue
        link = [e for e in (cap, sta) if e is not None]
        out.append(hyp("pcie_degraded", n.gpu(sta), conf, summary, ("PCIe link status vs capability", link)))
    gens = by(c.of("pcie_gen"), lambda e: e.component or "")
    widths = by(c.of("pcie_width"), lambda e: e.component or "")
    busy = {e.component for e in c.of("util_pct") if (e.value or 0) >= 50} | {
        e.component for e in c.of("pstate") if e.value is not None and e.value <= 2
    }
    for table, what in ((gens, "generation"), (widths, "width")):
        for comp, events in table.items():
            mx = [e for e in events if e.detail.get("key") in ("Max", "Device Max", "Host Max")]
            cur = [e for e in events if e.detail.get("key") in ("Current", "Device Current")]
            if not mx or not cur or (cur[0].value or 0) >= (mx[0].value or 0):
                continue
            conf = 0.65 if what == "width" or comp in busy else 0.2
            summary = f"PCIe link {what} below its maximum" + (
                "" if conf > 0.5 else " while the GPU is not shown busy (power saving is normal)"
            )
            out.append(
                hyp(
                    "pcie_degraded",
                    n.gpu(cur[0]),
                    conf,
                    summary,
                    (f"PCIe {what} current vs max", [mx[0], cur[0]]),
                )
            )
    return merge(out)


def thermal(c: Collected, n: Namer) -> list[Hyp]:
    active = [e for e in c.of("clocks_event") if e.code == 1]
    thermal = [e for e in active if "thermal" in e.detail.get("key", "").lower()]
    brake = [e for e in active if "power brake" in e.detail.get("key", "").lower()]
    hw = [e for e in active if e.detail.get("key", "").lower() == "hw slowdown"]
    out = per_component(
        thermal,
        n.gpu,
        "thermal_throttle",
        0.85,
        "clocks slowed for temperature (thermal slowdown active)",
        "clocks event reasons: thermal slowdown active",
    )
    out += per_component(
        brake,
        n.gpu,
        "power_brake",
        0.85,
        "HW power brake slowdown active (external power-brake signal)",
        "clocks event reasons: HW power brake active",
    )
    if not thermal and not brake:
        out += per_component(
            hw,
            n.gpu,
            "thermal_throttle",
            0.5,
            "HW slowdown active without the sub-reason shown",
            "clocks event reasons: HW slowdown active",
        )
    for mask in c.of("clocks_event_mask"):
        names = mask.detail.get("active", "")
        if "Thermal" in names:
            label, summary = "thermal_throttle", "dcgm-exporter clocks event reasons: thermal"
        elif "PowerBrake" in names:
            label, summary = "power_brake", "dcgm-exporter clocks event reasons: power brake"
        else:
            continue
        out.append(hyp(label, n.gpu(mask), 0.85, summary, ("DCGM clocks event reasons", [mask])))
    # At (or within 2 C of) the max operating / slowdown temperature, the GPU's thermal control slows clocks.
    for temps in by(c.of("temperature"), lambda e: e.component or "").values():
        current = [e for e in temps if e.detail.get("key") == "GPU Current Temp" and e.value is not None]
        limits = [
            e
            for e in temps
            if e.detail.get("key") in ("GPU Max Operating Temp", "GPU Slowdown Temp") and e.value is not None
        ]
        if current and limits:
            limit = min(limits, key=lambda e: e.value or 0.0)
            if (current[0].value or 0) >= (limit.value or 0) - 2:
                out.append(
                    hyp(
                        "thermal_throttle",
                        n.gpu(current[0]),
                        0.65,
                        "the GPU runs at its max operating / slowdown temperature, where clocks are reduced",
                        ("temperature at the GPU's limit", [current[0], limit]),
                    )
                )
    health = [e for e in c.of("dcgm_health") if e.detail.get("system") == "Thermal"]
    out += anchored(
        health,
        n.gpu,
        "thermal_throttle",
        0.45,
        "DCGM's health check reports a thermal clocks event; no temperature reading confirms it",
        "DCGM health: thermal",
    )
    return merge(out)
