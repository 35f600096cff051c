"""GPU rules: Xids, kernel GSP messages, nvidia-smi and dcgm readings -> hypotheses (sources: rules.py); a GPU
lost from the bus is rules_bus.py."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.evidence.hypotheses import Hyp, Namer, anchored, by, hyp, merge, per_component

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
# NVLink Xids: 74 (NVLink error), 137 and 144-150 (Blackwell/Hopper NVLink5 link-level errors: SAW, RLW,
# TLW, TREX, NETIR ...). 144 alone is most often a non-fatal warning: weaker.
NVLINK_XIDS = frozenset({74, 137, 145, 146, 147, 148, 149, 150})
NVLINK_WARNING_XIDS = frozenset({144})
FIRMWARE_XIDS = frozenset({119, 120})
APP_XIDS = frozenset({13, 31, 32, 43, 45})
# What backs the application reading of an application-class Xid (the Xid catalogue lists "user application
# error" among driver and hardware causes for 13/31/32/43): the same fault address hit by two processes (a
# deterministic fault, which a program repeats and a failing board does not), or the job's own CUDA error
# naming a program error. An SM exception that names a program error (Out Of Range Address, ...) is the Xid's
# own text: NVIDIA's Xid 13 workflow still asks to reproduce it (compute-sanitizer, other GPUs), so it only
# leans the reading (0.55) and stays inconclusive.
_PROGRAM_EXCEPTION = re.compile(
    r"Out Of Range Address|Illegal (?:Instruction|Address)|Misaligned (?:Address|PC|Reg)|Invalid Address Space|"
    r"Stack Error|Unsupported Address Space"
)
_PROGRAM_CUDA_ERROR = re.compile(
    r"illegal memory access|device-side assert|misaligned address|illegal instruction|out of memory", re.I
)
_FAULT_AT = re.compile(r"faulted @ (0x[0-9a-fA-F_]+)")
_PID = re.compile(r"pid=(\d+)")


def xids(c: Collected, codes: Iterable[int]) -> list[LogEvent]:
    wanted = set(codes)
    return [e for e in c.of("xid") if e.code in wanted]


def ecc(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    for code, conf in ECC_XIDS.items():
        out += per_component(
            xids(c, {code}),
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


def _caused_by(c: Collected, codes: frozenset[int]) -> list[LogEvent]:
    """Xids whose text says "caused by previous Xid N" with N in `codes` (the driver's own chain)."""
    out = []
    for e in c.of("xid"):
        cause = e.detail.get("caused_by_xid", "")
        if cause.isascii() and cause.isdigit() and int(cause) in codes:
            out.append(e)
    return out


def nvlink(c: Collected, n: Namer) -> list[Hyp]:
    chain = NVLINK_XIDS | NVLINK_WARNING_XIDS
    cleanups = _caused_by(c, chain)
    out = per_component(
        xids(c, NVLINK_XIDS),
        n.gpu,
        "nvlink_degraded",
        0.85,
        "NVLink error Xids (74/137/145-150): the GPU's NVLink links reported errors",
        "NVLink Xid",
        ("Xids the driver says the NVLink Xid caused", cleanups),
    )
    out += per_component(
        xids(c, NVLINK_WARNING_XIDS),
        n.gpu,
        "nvlink_degraded",
        0.6,
        "NVLink Xid 144 (often a non-fatal link warning): the link logged errors",
        "NVLink Xid 144",
        ("Xids the driver says the NVLink Xid caused", cleanups),
    )
    if not out:
        out += anchored(
            cleanups,
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
    firmware_xids = xids(c, FIRMWARE_XIDS)
    recovery = xids(c, {154})
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


def _application_backing(c: Collected, app: list[LogEvent]) -> list[LogEvent]:
    """The lines that back the application reading of `app` (see above); [] when none."""
    by_address: dict[str, list[LogEvent]] = {}
    for e in app:
        if (m := _FAULT_AT.search(e.raw)) is not None:
            by_address.setdefault(m.group(1), []).append(e)
    repeated = [
        group[0]
        for group in by_address.values()
        if len({m.group(1) for g in group if (m := _PID.search(g.raw)) is not None}) >= 2
    ]
    cuda = [e for e in c.of("cuda_error") if _PROGRAM_CUDA_ERROR.search(e.detail.get("what", ""))]
    return repeated + cuda


def application(c: Collected, n: Namer) -> list[Hyp]:
    app = [e for e in xids(c, APP_XIDS) if "caused_by_xid" not in e.detail]
    if not app:
        return []
    hardware = xids(c, HW_XIDS) + c.of("fell_off_bus") + c.of("gsp_timeout") + c.of("aer_surprise_down")
    if hardware:
        return []  # Xid 13/31/32/43/45 next to hardware Xids are consequences, not an application's fault
    codes = sorted({e.code for e in app if e.code is not None})
    backing = _application_backing(c, app)
    if backing:
        return per_component(
            app,
            n.gpu,
            "application_error",
            0.65,
            f"application-class Xids {codes}, backed by a program error in the lines (a fault repeated at the "
            "same address by different processes, or the job's CUDA error naming one); no hardware Xid",
            "application-class Xid",
            ("what points at the program", backing),
        )
    named = [e for e in app if e.code == 13 and _PROGRAM_EXCEPTION.search(e.raw)]
    lean = " (the SM exception names a program error, which leans towards the program)" if named else ""
    return per_component(
        app,
        n.gpu,
        "application_error",
        0.55 if named else 0.5,
        f"application-class Xids {codes} with nothing to back either reading{lean}: a program bug (bad "
        "address, illegal instruction) or the driver/hardware (a driver regression or failing card gives the "
        "same lines). What decides: whether another program or another GPU reproduces it (run the GPU's "
        "diagnostics and a known-good workload on it), and whether it started with a driver change",
        "application-class Xid",
        ("the SM exception names a program error", named),
    )


def driver_state(c: Collected, n: Namer) -> list[Hyp]:
    """CUDA's "system not yet initialized" (802: a required driver daemon, on NVSwitch systems the fabric
    manager, is not running or not ready), the driver's parts of different versions (the kernel module's `API
    mismatch`, NVML's NVML_ERROR_LIB_RM_VERSION_MISMATCH) and the driver failing to initialise a GPU
    (RmInitAdapter)."""
    out = anchored(
        c.of("driver_mismatch"),
        n.node,
        "gpu_driver_firmware_fault",
        0.7,
        "the loaded NVIDIA kernel module and the user-space driver are of different versions (NVRM 'API "
        "mismatch' / NVML 'Driver/library version mismatch'): the driver was upgraded without reloading its "
        "module, or its packages are out of step; NVML and CUDA fail until they match (reboot, or reload the "
        "module; pin the driver's packages against unattended upgrades)",
        "driver version mismatch",
    )
    out += anchored(
        [e for e in c.of("cuda_error") if e.detail.get("code") == "802"],
        n.node,
        "gpu_driver_firmware_fault",
        0.7,
        "CUDA error 802 'system not yet initialized': the GPU driver stack is not ready; on NVSwitch systems "
        "(HGX/DGX) the fabric manager is not running or does not match the driver",
        "CUDA system not ready (802)",
    )
    out += anchored(
        [e for e in c.of("fabric_state") if e.code == 1],
        n.gpu,
        "gpu_driver_firmware_fault",
        0.65,
        "the GPU is not registered with the NVLink fabric (nvidia-smi Fabric State/Status): the fabric manager "
        "is not running, still in progress, or failed; CUDA work on it fails (error 802) until it completes",
        "nvidia-smi Fabric state",
    )
    lost = xids(c, {79}) + c.of("fell_off_bus")
    if not lost:
        out += anchored(
            c.of("init_failed"),
            n.gpu,
            "gpu_driver_firmware_fault",
            0.5,
            "the driver could not initialise the GPU (RmInitAdapter failed): a driver/firmware mismatch or "
            "the board itself; suspect the driver first when it began after a driver change",
            "driver failed to initialise the GPU",
        )
    return out


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
        if width_down and sta.component is not None:
            conf, summary = 0.7, "the PCIe link trained narrower than its capability"
        # an excerpt without the device's header: which device, and what its slot offers, unknown
        elif width_down:
            conf, summary = (
                0.45,
                "a PCIe link trained narrower than its device's capability, but the excerpt does not say which "
                "device it is; a card in a narrower slot or riser reads the same (compare the upstream port's LnkCap)",
            )
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


def _power_brake(brake: list[LogEvent], c: Collected, n: Namer) -> list[Hyp]:
    """The HW power brake per GPU; asserted on every GPU of a node (two or more), the node's: the brake is a signal
    from outside the board (the chassis' power controller, a PSU), so what asked it is the node's power."""
    out: list[Hyp] = []
    braked_by_node = by(brake, n.node)
    gpus_by_node = by([e for e in c.of("clocks_event") if e.component], n.node)
    for node, events in braked_by_node.items():
        braked = {n.gpu(e) for e in events}
        seen = {n.gpu(e) for e in gpus_by_node.get(node, [])}
        if len(braked) >= 2 and braked == seen:
            summary = (
                f"HW power brake slowdown active on every GPU of the node ({len(braked)} of {len(seen)}): an "
                "external power-brake signal for the whole node (its power supply or the chassis' power controller)"
            )
            out.append(
                hyp(
                    "power_brake",
                    node,
                    0.85,
                    summary,
                    ("clocks event reasons: HW power brake active", events),
                )
            )
        else:
            out += per_component(
                events,
                n.gpu,
                "power_brake",
                0.85,
                "HW power brake slowdown active (external power-brake signal)",
                "clocks event reasons: HW power brake active",
            )
    return out


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
    out += _power_brake(brake, c, n)
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
    gpus = {e.component for e in c.of("temperature") if e.component}
    alone = next(iter(gpus)) if len(gpus) == 1 else ""  # one GPU: a reading before its header is its own
    for temps in by(c.of("temperature"), lambda e: e.component or alone).values():
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
