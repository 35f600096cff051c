"""Rules: what the evidence lines mean, as NVIDIA and NCCL document them, turned into ranked hypotheses.

Sources (docs/INVESTIGATE.md has the table):
- Xid meanings: NVIDIA "Xid Errors" (docs.nvidia.com/deploy/xid-errors): 79 GPU has fallen off the bus;
  48 DBE; 63/64 ECC page retirement / row remapping event or failure; 94/95 contained / uncontained ECC;
  74 NVLink error; 137/145 NVLink (Blackwell) link errors; 119/120 GSP RPC timeout / GSP error;
  154 GPU recovery action changed; 13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped
  processing, 45 preemptive cleanup (user-application classes unless hardware Xids accompany them).
- Remapped rows pending/failure and retired pages: NVIDIA "GPU Memory Error Management" (A100+ row remapping).
- Clocks event reasons: NVML `nvmlClocksEventReasons` (HW thermal / SW thermal / HW power brake slowdown).
- ibverbs completion status 12 = IBV_WC_RETRY_EXC_ERR (libibverbs verbs.h); NCCL's environment docs for
  NCCL_IB_GID_INDEX (RoCE needs a routable RoCE v2 GID; a link-local fe80:: GID made from the MAC is the
  default index 0/1 and is a common misconfiguration).
- Watchdog timeouts: PyTorch ProcessGroupNCCL reports that a collective did not complete: a symptom.

Confidence is the strength of the evidence, not of the label's prior: ≥ 0.6 diagnoses (investigate.py).
"""

from __future__ import annotations

import itertools
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent

MAX_ROWS = 6

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
ECC_XIDS = {48: 0.9, 94: 0.85, 95: 0.9, 63: 0.7, 64: 0.75, 92: 0.6}
NVLINK_XIDS = frozenset({74, 137, 145})
FIRMWARE_XIDS = frozenset({119, 120})
APP_XIDS = frozenset({13, 31, 43, 45})
_EUI64_LINK_LOCAL = re.compile(
    r"^fe80::(?:[0-9a-f]{1,4}:)?[0-9a-f]{1,4}ff:fe[0-9a-f]{1,2}:[0-9a-f]{1,4}$", re.I
)


@dataclass
class Hyp:
    root_cause: str
    component: str
    confidence: float
    summary: str
    evidence: list[dict[str, object]] = field(default_factory=list)

    def cite(self, title: str, events: Iterable[LogEvent]) -> None:
        chosen = list(events)[:MAX_ROWS]
        if chosen:
            self.evidence.append(
                {
                    "title": title,
                    "source": chosen[0].cite,
                    "sources": [e.cite for e in chosen],
                    "rows": [e.raw for e in chosen],
                }
            )


class Namer:
    """Component names without topology: the host the evidence names (`node0` when none), GPUs by index when
    known (`host/gpu5`), else by PCI bus id (`host/gpu@0000:07:00.0`), NICs by HCA port (`host/nic@mlx5_0:1`)."""

    def __init__(self, collected: Collected) -> None:
        self.index: dict[str, int] = {}
        for header in collected.of("gpu_header"):
            if header.component and header.code is not None:
                self.index[header.component] = header.code
        for xid in collected.of("xid"):
            if xid.component and "gpu_index" in xid.detail:
                self.index.setdefault(xid.component, int(xid.detail["gpu_index"]))

    def gpu(self, event: LogEvent) -> str:
        host = event.host or "node0"
        comp = event.component
        if comp is None:
            return host
        if comp in self.index:
            return f"{host}/gpu{self.index[comp]}"
        if comp.startswith("GPU") and comp[3:].isdigit():
            return f"{host}/gpu{comp[3:]}"
        return f"{host}/gpu@{comp}"

    def nic(self, event: LogEvent) -> str:
        host = event.host or "node0"
        return f"{host}/nic@{event.component}" if event.component else host

    @staticmethod
    def node(event: LogEvent) -> str:
        return event.host or "node0"


def _by(events: Iterable[LogEvent], key: Callable[[LogEvent], str]) -> dict[str, list[LogEvent]]:
    out: dict[str, list[LogEvent]] = {}
    for e in events:
        out.setdefault(key(e), []).append(e)
    return out


def hypotheses(c: Collected) -> list[Hyp]:
    namer = Namer(c)
    out: list[Hyp] = []
    for rule in (_fell_off_bus, _ecc, _nvlink, _firmware, _application, _pcie, _thermal, _network, _input):
        out.extend(rule(c, namer))
    out.sort(key=lambda h: -h.confidence)
    return out


def _xids(c: Collected, codes: Iterable[int]) -> list[LogEvent]:
    wanted = set(codes)
    return [e for e in c.of("xid") if e.code in wanted]


def _fell_off_bus(c: Collected, n: Namer) -> list[Hyp]:
    lost = _xids(c, {79}) + c.of("fell_off_bus")
    surprise = c.of("aer_surprise_down")
    if lost:
        out = []
        for comp, events in _by(lost, n.gpu).items():
            h = Hyp(
                "gpu_fell_off_bus",
                comp,
                0.95 if surprise else 0.93,
                "the GPU stopped answering on PCIe (Xid 79 / 'fallen off the bus')",
            )
            h.cite("GPU has fallen off the bus", events)
            h.cite("PCIe AER Surprise Down on the GPU's upstream port", surprise)
            out.append(h)
        return out
    if surprise:
        h = Hyp(
            "gpu_fell_off_bus",
            n.node(surprise[0]),
            0.55,
            "a PCIe link went down unexpectedly (AER Surprise Down); no GPU-side message ties it to a GPU",
        )
        h.cite("PCIe AER Surprise Down", surprise)
        return [h]
    return []


def _ecc(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    for code, conf in ECC_XIDS.items():
        for comp, events in _by(_xids(c, {code}), n.gpu).items():
            h = Hyp("gpu_ecc_error", comp, conf, f"Xid {code}: uncorrectable memory error / page retirement")
            h.cite(f"Xid {code}", events)
            out.append(h)
    readings: list[tuple[str, Callable[[LogEvent], bool], float, str]] = [
        ("remap_pending", lambda e: e.code == 1, 0.85, "remapped rows pending (a reset is needed to remap)"),
        ("remap_failure", lambda e: e.code == 1, 0.9, "row remapping failed"),
        ("retire_pending", lambda e: e.code == 1, 0.75, "retired pages pending"),
        ("ecc_uncorrectable", lambda e: (e.value or 0) > 0, 0.85, "volatile uncorrectable ECC errors"),
        ("cuda_ecc_uncorrectable", lambda e: True, 0.75, "CUDA reported an uncorrectable ECC error"),
    ]
    for kind, test, conf, summary in readings:
        events = [e for e in c.of(kind) if test(e)]
        for comp, group in _by(events, n.gpu).items():
            h = Hyp("gpu_ecc_error", comp, conf, summary)
            h.cite(summary, group)
            h.cite(
                "uncorrectable errors behind remapped rows",
                [e for e in c.of("remap_uncorrectable") if (e.value or 0) > 0],
            )
            out.append(h)
    return _merge(out)


def _nvlink(c: Collected, n: Namer) -> list[Hyp]:
    out = []
    for comp, events in _by(_xids(c, NVLINK_XIDS), n.gpu).items():
        h = Hyp("nvlink_degraded", comp, 0.85, "NVLink error Xids (74/137/145)")
        h.cite("NVLink Xid", events)
        out.append(h)
    if not out:
        referenced = [
            e
            for e in c.of("xid")
            if e.detail.get("caused_by_xid", "").isdigit()
            and int(e.detail["caused_by_xid"]) in NVLINK_XIDS | {144, 146, 147, 148, 149, 150}
        ]
        if referenced:
            h = Hyp(
                "nvlink_degraded",
                n.gpu(referenced[0]),
                0.4,
                "Xid 45 cleanups name an earlier NVLink Xid that is not in the evidence: look for it",
            )
            h.cite("cleanup caused by a previous NVLink Xid", referenced)
            out.append(h)
        crc = [e for e in c.of("nvlink_crc") if (e.value or 0) > 0]
        if crc:
            h = Hyp("nvlink_degraded", n.gpu(crc[0]), 0.45, "NVLink CRC flit errors counted")
            h.cite("DCGM NVLink CRC flit errors", crc)
            out.append(h)
    return _merge(out)


def _firmware(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    gsp = c.of("gsp_timeout") + c.of("gsp_error")
    firmware_xids = _xids(c, FIRMWARE_XIDS)
    recovery = _xids(c, {154})
    if firmware_xids or gsp:
        anchor = (firmware_xids or recovery or gsp)[0]
        conf = 0.9 if firmware_xids else (0.85 if recovery else 0.75)
        h = Hyp(
            "gpu_driver_firmware_fault",
            n.gpu(anchor),
            conf,
            "the GPU's GSP firmware timed out or failed (Xid 119/120, GSP heartbeat/RPC timeouts)",
        )
        h.cite("GSP timeout / GSP error Xid", firmware_xids)
        h.cite("GSP messages", gsp)
        h.cite("recovery action required (Xid 154)", recovery)
        out.append(h)
    elif recovery:
        h = Hyp(
            "gpu_driver_firmware_fault",
            n.gpu(recovery[0]),
            0.45,
            "Xid 154 says the GPU needs a reset; the failure that led to it is not in the evidence",
        )
        h.cite("recovery action required (Xid 154)", recovery)
        out.append(h)
    return out


def _application(c: Collected, n: Namer) -> list[Hyp]:
    app = [e for e in _xids(c, APP_XIDS) if "caused_by_xid" not in e.detail]
    if not app:
        return []
    hardware = _xids(c, HW_XIDS) + c.of("fell_off_bus") + c.of("gsp_timeout") + c.of("aer_surprise_down")
    if hardware:
        return []  # Xid 13/31/43/45 next to hardware Xids are consequences, not an application's fault
    codes = {e.code for e in app if e.code is not None}
    conf = 0.65 if codes & {13, 31} else 0.6
    out = []
    for comp, events in _by(app, n.gpu).items():
        h = Hyp(
            "application_error",
            comp,
            conf,
            f"application-class Xids {sorted(codes)} with no hardware Xid: the program's fault is most likely",
        )
        h.cite("application-class Xid", events)
        out.append(h)
    return out


def _pcie(c: Collected, n: Namer) -> list[Hyp]:
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
            h = Hyp("pcie_degraded", n.gpu(sta), 0.7, "the PCIe link trained narrower than its capability")
        elif speed_down:
            h = Hyp(
                "pcie_degraded",
                n.gpu(sta),
                0.3,
                "the PCIe link runs below its maximum speed; an idle GPU does this to save power, so this "
                "means something only under load",
            )
        else:
            continue
        h.cite("PCIe link status vs capability", [e for e in (cap, sta) if e is not None])
        out.append(h)
    gens = _by(c.of("pcie_gen"), lambda e: e.component or "")
    widths = _by(c.of("pcie_width"), lambda e: e.component or "")
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
            h = Hyp(
                "pcie_degraded",
                n.gpu(cur[0]),
                conf,
                f"PCIe link {what} below its maximum"
                + ("" if conf > 0.5 else " while the GPU is not shown busy (power saving is normal)"),
            )
            h.cite(f"PCIe {what} current vs max", [mx[0], cur[0]])
            out.append(h)
    return _merge(out)


def _thermal(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    active = [e for e in c.of("clocks_event") if e.code == 1]
    thermal = [e for e in active if "thermal" in e.detail.get("key", "").lower()]
    brake = [e for e in active if "power brake" in e.detail.get("key", "").lower()]
    hw = [e for e in active if e.detail.get("key", "").lower() == "hw slowdown"]
    for comp, events in _by(thermal, n.gpu).items():
        h = Hyp("thermal_throttle", comp, 0.85, "clocks slowed for temperature (thermal slowdown active)")
        h.cite("clocks event reasons: thermal slowdown active", events)
        out.append(h)
    for comp, events in _by(brake, n.gpu).items():
        h = Hyp("power_brake", comp, 0.85, "HW power brake slowdown active (external power-brake signal)")
        h.cite("clocks event reasons: HW power brake active", events)
        out.append(h)
    if hw and not thermal and not brake:
        for comp, events in _by(hw, n.gpu).items():
            h = Hyp("thermal_throttle", comp, 0.5, "HW slowdown active without the sub-reason shown")
            h.cite("clocks event reasons: HW slowdown active", events)
            out.append(h)
    for mask in c.of("clocks_event_mask"):
        names = mask.detail.get("active", "")
        if "Thermal" in names:
            h = Hyp("thermal_throttle", n.gpu(mask), 0.85, "dcgm-exporter clocks event reasons: thermal")
        elif "PowerBrake" in names:
            h = Hyp("power_brake", n.gpu(mask), 0.85, "dcgm-exporter clocks event reasons: power brake")
        else:
            continue
        h.cite("DCGM clocks event reasons", [mask])
        out.append(h)
    # At (or within 2 C of) the max operating / slowdown temperature, the GPU's thermal control slows clocks.
    for temps in _by(c.of("temperature"), lambda e: e.component or "").values():
        current = [e for e in temps if e.detail.get("key") == "GPU Current Temp" and e.value is not None]
        limits = [
            e
            for e in temps
            if e.detail.get("key") in ("GPU Max Operating Temp", "GPU Slowdown Temp") and e.value is not None
        ]
        if current and limits:
            limit = min(limits, key=lambda e: e.value or 0.0)
            if (current[0].value or 0) >= (limit.value or 0) - 2:
                h = Hyp(
                    "thermal_throttle",
                    n.gpu(current[0]),
                    0.65,
                    "the GPU runs at its max operating / slowdown temperature, where clocks are reduced",
                )
                h.cite("temperature at the GPU's limit", [current[0], limit])
                out.append(h)
    health = [e for e in c.of("dcgm_health") if e.detail.get("system") == "Thermal"]
    if health:
        h = Hyp(
            "thermal_throttle",
            n.gpu(health[0]),
            0.45,
            "DCGM's health check reports a thermal clocks event; no temperature reading confirms it",
        )
        h.cite("DCGM health: thermal", health)
        out.append(h)
    return _merge(out)


def _is_roce_link_local(gid: str) -> bool:
    return bool(_EUI64_LINK_LOCAL.match(gid))


def _network(c: Collected, n: Namer) -> list[Hyp]:
    out: list[Hyp] = []
    port_errors = c.of("ib_port_error")
    if port_errors:
        h = Hyp(
            "nic_link_flap", n.nic(port_errors[0]), 0.75, "the HCA reported a port error (link went down)"
        )
        h.cite("IB async event: port error", port_errors)
        out.append(h)
    states = _by(c.of("ib_port_state"), lambda e: e.component or "")
    for _comp, events in states.items():
        polling = [e for e in events if e.detail.get("physical") == "polling"]
        changes = len({(e.detail.get("state"), e.detail.get("physical")) for e in events})
        if polling:
            conf = 0.8 if changes > 1 else 0.7
            h = Hyp(
                "nic_link_flap",
                n.nic(events[0]),
                conf,
                "the IB port is polling (its link lost the partner)"
                + (" and changed state" if changes > 1 else ""),
            )
            h.cite("IB port state", events)
            out.append(h)
    downs = [e for e in c.of("nic_link") if e.code == 0]
    if downs:
        by_dev = _by(c.of("nic_link"), lambda e: e.component or "")
        for dev, events in by_dev.items():
            transitions = sum(1 for a, b in itertools.pairwise(events) if a.code != b.code)
            if any(e.code == 0 for e in events):
                h = Hyp(
                    "nic_link_flap",
                    n.nic(events[0]),
                    0.75 if transitions >= 2 else 0.6,
                    f"link of {dev} went down" + (" and up repeatedly" if transitions >= 2 else ""),
                )
                h.cite("kernel link state", events)
                out.append(h)
    link_downed = [e for e in c.of("ib_counter") if int(e.detail.get("LinkDownedCounter", "0") or 0) > 0]
    if link_downed:
        h = Hyp("nic_link_flap", n.nic(link_downed[0]), 0.6, "LinkDownedCounter > 0")
        h.cite("IB counters", link_downed)
        out.append(h)
    flaps = [e for e in c.of("carrier_changes") if (e.value or 0) > 0]
    if flaps:
        h = Hyp(
            "nic_link_flap",
            n.nic(flaps[0]),
            0.4,
            "carrier changes counted (also counts planned link changes)",
        )
        h.cite("node_exporter carrier changes", flaps)
        out.append(h)
    # NCCL/UCX completion errors and QP async errors: symptoms, unless a configuration clue names the cause.
    errors = c.of("ib_completion_error") + c.of("ib_async_event")
    if errors:
        gids = [e for e in errors if _is_roce_link_local(e.detail.get("local_gid", ""))]
        if gids:
            h = Hyp(
                "roce_config_error",
                n.nic(gids[0]),
                0.65,
                "NCCL uses a link-local, MAC-derived RoCE GID (GID index 0/1): a routable RoCE v2 GID "
                "(NCCL_IB_GID_INDEX) and matching MTUs are the usual fix",
            )
            h.cite("completion errors on a link-local RoCE GID", gids)
            h.cite("QP async errors", c.of("ib_async_event"))
            out.append(h)
        elif not out:
            h = Hyp(
                "nic_link_flap",
                n.nic(errors[0]),
                0.35,
                "RDMA completion errors (e.g. retry exceeded) say a peer was unreachable; the cause (link, "
                "peer crash, RoCE configuration) is not in the evidence",
            )
            h.cite("RDMA completion errors", errors)
            out.append(h)
    return _merge(out)


def _input(c: Collected, n: Namer) -> list[Hyp]:
    steps = c.of("train_step")
    if not steps:
        return []
    fractions = [float(e.detail["data_fraction"]) for e in steps]
    median = statistics.median(fractions)
    if median >= 0.5:
        conf = 0.8
    elif median >= 0.3:
        conf = 0.45
    else:
        return []
    h = Hyp(
        "input_pipeline_bottleneck",
        n.node(steps[0]),
        conf,
        f"data loading takes {median:.0%} of each step (median of {len(steps)} steps)",
    )
    h.cite("step time vs data time", steps)
    return [h]


def _merge(hyps: list[Hyp]) -> list[Hyp]:
    """One hypothesis per (label, component): the strongest, with the others' evidence appended."""
    best: dict[tuple[str, str], Hyp] = {}
    for h in sorted(hyps, key=lambda h: -h.confidence):
        key = (h.root_cause, h.component)
        if key in best:
            best[key].evidence.extend(e for e in h.evidence if e not in best[key].evidence)
        else:
            best[key] = h
    return list(best.values())


ANOMALY_KINDS = frozenset(
    {
        "xid",
        "fell_off_bus",
        "aer",
        "aer_surprise_down",
        "gsp_timeout",
        "gsp_error",
        "init_failed",
        "nvrm_error",
        "ib_completion_error",
        "ib_port_error",
        "ib_async_event",
        "nccl_watchdog_timeout",
        "cuda_error",
        "cuda_ecc_uncorrectable",
        "dcgm_health",
        "gpu_unhealthy",
        "ecc_uncorrectable",
    }
)


def anomalies(c: Collected) -> list[LogEvent]:
    """Events that show something wrong, whether or not a rule explains them."""
    out = [e for kind in ANOMALY_KINDS for e in c.of(kind)]
    out += [
        e
        for e in c.of("clocks_event")
        if e.code == 1
        and e.detail.get("key", "").lower()
        not in ("idle", "gpu idle", "applications clocks setting", "display clock setting", "sync boost")
    ]
    out += [e for k in ("remap_pending", "remap_failure", "retire_pending") for e in c.of(k) if e.code == 1]
    out += [e for e in c.of("ib_port_state") if e.detail.get("physical") not in ("linkup", "link_up")]
    out += [e for e in c.of("nic_link") if e.code == 0]
    out += [
        e
        for e in c.of("pcie_link_sta")
        if "True" in (e.detail.get("speed_downgraded"), e.detail.get("width_downgraded"))
    ]
    out += [
        e
        for e in c.of("ipmi_sel")
        if e.code == 1 and re.search(r"[Cc]ritical|[Ff]ail|[Ee]rror", e.detail.get("event", ""))
    ]
    return sorted(out, key=lambda e: (e.source, e.line))
