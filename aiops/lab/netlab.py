"""`aiops lab net`: VIP (collective) latency and bulk throughput through a 200 Mbit/s bottleneck, three ways.

Hosts are network namespaces joined by veth pairs, addresses in 198.18.0.0/15:

    sender 198.18.0.1 --(bottleneck: HTB on the sender's egress)-- fabric --+-- peer     198.18.1.2
      cgroup trainer:    ring all-reduce chunks, request/response -> peer   |
      cgroup checkpoint: bulk TCP streams -> storage                        +-- storage  198.19.1.2

Phases: `alone` (VIP only, one FIFO HTB class), `no_lanes` (VIP + bulk flood, one FIFO class), `lanes`
(VIP + bulk with the lanes classifier, ECN and the adaptive controller, which knows the checkpoint schedule
from job context). Everything it starts is torn down on exit, error or Ctrl-C (processes by PID only).
"""

from __future__ import annotations

import json
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

from aiops.control.controller import KernelLanes, run_controller
from aiops.control.forecast import BulkForecast, CheckpointSchedule
from aiops.control.laws import initial_rates
from aiops.datapath import lanes, tc
from aiops.datapath.loader import require_bcc
from aiops.datapath.policy import Policy, parse_policy
from aiops.lab.netns import Sandbox, in_ns, lab_prerequisites, sh
from aiops.text import plain

VIP_PORT = 18515
BULK_PORT = 18516
PEER_IP, STORAGE_IP = "198.18.1.2", "198.19.1.2"


@dataclass(frozen=True)
class LabConfig:
    bottleneck_mbps: float = 200.0
    phase_s: float = 8.0
    bulk_warmup_s: float = 1.5
    bulk_streams: int = 4
    vip_sizes: str = "16384,65536,131072"  # ring all-reduce chunk sizes (bytes)
    vip_rate_hz: float = 40.0
    controller_lead_s: float = 1.0


@dataclass
class Lab:
    box: Sandbox
    sender: str
    dev: str
    trainer: Any
    checkpoint: Any
    bulk_server: Any


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(int(fraction * len(ordered)), len(ordered) - 1)]


def build(box: Sandbox, progress: Callable[[str], None]) -> Lab:
    progress(
        f"building namespaces {box.tag}-{{snd,fab,peer,stor}} and cgroups {box.tag}/{{trainer,checkpoint}}"
    )
    sender, fabric, peer, storage = (box.netns(r) for r in ("snd", "fab", "peer", "stor"))
    tag = box.tag[-6:]
    dev = f"bn{tag}"
    box.veth(sender, dev, "198.18.0.1/30", fabric, f"fs{tag}", "198.18.0.2/30")
    box.veth(fabric, f"fp{tag}", "198.18.1.1/30", peer, f"pe{tag}", "198.18.1.2/30")
    box.veth(fabric, f"fb{tag}", "198.19.1.1/30", storage, f"st{tag}", "198.19.1.2/30")
    box.route(sender, "198.18.0.0/15", dev)
    sh([*in_ns(sender), "ip", "route", "replace", "198.18.0.0/15", "via", "198.18.0.2"])
    sh([*in_ns(peer), "ip", "route", "add", "default", "via", "198.18.1.1"])
    sh([*in_ns(storage), "ip", "route", "add", "default", "via", "198.19.1.1"])
    box.sysctl(fabric, "net.ipv4.ip_forward", "1")
    for ns in (sender, peer, storage):
        box.sysctl(ns, "net.ipv4.tcp_ecn", "1")  # ECN-capable transport, so CE marks can slow bulk down
    trainer, checkpoint = box.cgroup("trainer"), box.cgroup("checkpoint")
    vip_server = box.python(peer, ["vip-server", "--port", str(VIP_PORT), "--max-s", "600"])
    bulk_server = box.python(storage, ["bulk-server", "--port", str(BULK_PORT), "--max-s", "600"])
    for server in (vip_server, bulk_server):
        assert server.stdout is not None
        server.stdout.readline()  # {"listening": port}
    return Lab(box, sender, dev, trainer, checkpoint, bulk_server)


def fifo_bottleneck(lab: Lab, mbps: float) -> None:
    """One HTB class at the bottleneck rate: a single FIFO for everything (no lanes)."""
    tc.delete_root(lab.dev, lab.sender)
    tc.add_htb_root(lab.dev, mbps, 0x10, lab.sender)
    tc.add_class(lab.dev, tc.HtbClass(0x10, mbps, mbps, 0), lab.sender)


def lab_policy(lab: Lab, config: LabConfig) -> Policy:
    def rule(rule_id: str, kind: str, lane: str, **match: Any) -> dict[str, Any]:
        return {"rule_id": rule_id, "match_kind": kind, "lane": lane, **match}

    link = config.bottleneck_mbps
    return parse_policy(
        {
            "link_mbps": link,
            "lanes": {
                "vip": {"min_mbps": 0.1 * link, "prio": 0},
                "standard": {"min_mbps": 0.05 * link, "prio": 1},
                "bulk": {"min_mbps": 0.05 * link, "prio": 2},
            },
            "ecn": {"enabled": True, "threshold_ms": 5},
            "adaptive": {
                "enabled": True,
                "interval_s": 0.1,
                "vip_headroom_ratio": 1.5,
                "vip_floor_mbps": 0.1 * link,
                "forecast_lead_s": config.controller_lead_s,
                "forecast_bulk_share": 0.5,
            },
            "rules": [
                rule("collective-cgroup", "cgroup", "vip", cgroups=[lab.box.cgroup_rel(lab.trainer)]),
                rule("collective-dscp", "dscp", "vip", dscp=[46]),
                rule("checkpoint-cgroup", "cgroup", "bulk", cgroups=[lab.box.cgroup_rel(lab.checkpoint)]),
                rule("peer-prefix", "dst_prefix", "vip", prefixes=["198.18.1.0/24"]),
                rule("storage-prefix", "dst_prefix", "bulk", prefixes=["198.19.1.0/24"]),
                rule("default", "default", "standard"),
            ],
        },
        "<lab policy>",
    )


def run_phase(lab: Lab, config: LabConfig, with_bulk: bool) -> dict[str, float]:
    bulk = None
    if with_bulk:
        bulk = lab.box.python(
            lab.sender,
            [
                "bulk-client",
                "--dst",
                STORAGE_IP,
                "--port",
                str(BULK_PORT),
                "--streams",
                str(config.bulk_streams),
                "--duration-s",
                str(config.phase_s + config.bulk_warmup_s + 0.5),
            ],
            lab.checkpoint,
        )
        time.sleep(config.bulk_warmup_s)
    vip = lab.box.python(
        lab.sender,
        [
            "vip-client",
            "--dst",
            PEER_IP,
            "--port",
            str(VIP_PORT),
            "--sizes",
            config.vip_sizes,
            "--rate-hz",
            str(config.vip_rate_hz),
            "--duration-s",
            str(config.phase_s),
        ],
        lab.trainer,
    )
    vip_out, _ = vip.communicate(timeout=config.phase_s + 60)
    result = json.loads(vip_out)
    latencies: list[float] = result["latencies_ms"]
    bulk_mbps = 0.0
    if bulk is not None:
        bulk.communicate(timeout=config.phase_s + 60)
        bulk_mbps = _bulk_mbps(lab, config.bulk_streams)
    return {
        "vip_p50_ms": round(statistics.median(latencies), 3) if latencies else float("nan"),
        "vip_p99_ms": round(percentile(latencies, 0.99), 3),
        "vip_mbps": round(result["bytes"] * 8 / result["elapsed_s"] / 1e6, 2),
        "bulk_mbps": round(bulk_mbps, 2),
    }


def _bulk_mbps(lab: Lab, streams: int) -> float:
    """Receiver-side throughput of the phase's bulk connections (one JSON line per closed connection)."""
    assert lab.bulk_server.stdout is not None
    rows: list[dict[str, float]] = []
    deadline = time.monotonic() + 20
    while len(rows) < streams and time.monotonic() < deadline:
        line = lab.bulk_server.stdout.readline()
        if not line:
            break
        rows.append(json.loads(line))
    got = [r for r in rows if r["bytes"] > 0]
    if not got:
        return 0.0
    window_s = max(r["last_s"] for r in got) - min(r["first_s"] for r in got)
    return float(sum(r["bytes"] for r in got) * 8 / max(window_s, 1e-6) / 1e6)


@contextmanager
def _controller(lab: Lab, policy: Policy, schedule: CheckpointSchedule, max_s: float) -> Iterator[None]:
    stop = threading.Event()
    actuator = KernelLanes(lab.dev, lab.sender, policy)
    thread = threading.Thread(
        target=run_controller,
        daemon=True,
        args=(policy, actuator),
        kwargs={"duration_s": max_s, "should_stop": stop.is_set, "forecast": BulkForecast(schedule=schedule)},
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        actuator.close()


def run_lab(config: LabConfig, progress: Callable[[str], None]) -> dict[str, Any]:
    lab_prerequisites()
    require_bcc()
    previous = signal.getsignal(signal.SIGTERM)

    def terminate(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    phases: dict[str, dict[str, float]] = {}
    lab: Lab | None = None
    try:
        with Sandbox("lab") as box:
            try:
                lab = build(box, progress)
                fifo_bottleneck(lab, config.bottleneck_mbps)
                progress(f"phase alone: VIP only, FIFO at {config.bottleneck_mbps:g} Mbit/s")
                phases["alone"] = run_phase(lab, config, with_bulk=False)
                progress(f"  {phases['alone']}")
                progress("phase no_lanes: VIP + bulk flood in one FIFO class")
                phases["no_lanes"] = run_phase(lab, config, with_bulk=True)
                progress(f"  {phases['no_lanes']}")
                progress("phase lanes: lanes classifier + ECN + adaptive controller")
                tc.delete_root(lab.dev, lab.sender)
                policy = lab_policy(lab, config)
                lanes.apply(lab.dev, policy, "<lab policy>", netns=lab.sender, rates=initial_rates(policy))
                checkpoint_at = time.time() + config.controller_lead_s + 0.5
                schedule = CheckpointSchedule(
                    every_s=3600,
                    first_start_ts_s=checkpoint_at,
                    duration_s=config.phase_s + config.bulk_warmup_s,
                )
                with _controller(lab, policy, schedule, config.phase_s * 3 + 30):
                    time.sleep(max(checkpoint_at - time.time(), 0))
                    phases["lanes"] = run_phase(lab, config, with_bulk=True)
                progress(f"  {phases['lanes']}")
            finally:
                if lab is not None:
                    lanes.remove(lab.dev, lab.sender)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return {"phases": phases, "bottleneck_mbps": config.bottleneck_mbps}


def print_progress(message: str) -> None:
    print(f"lab: {plain(message)}", file=sys.stderr, flush=True)
