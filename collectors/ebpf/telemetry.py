"""Network telemetry of a NIC with lanes, as store batches: nic_samples (one row per lane and interval),
flow_class_samples (one row per rule and lane that carried traffic), lane_rules (a snapshot of the rules).

Counters come from the classifier's per-CPU map (one update per packet in the datapath), drops and backlog
from the HTB classes, retransmits from the optional TcpProbe joined to the lane each connection's SYN took
(flow_lane map). Each `collect()` covers the time since the previous one; the first call only primes.
`collect_lanes` is the sampling loop of `aiops lanes collect`: collect every interval, hand batches to a writer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from aiops.datapath import tc
from aiops.datapath.lanes import LanesState
from aiops.datapath.maps import LaneMaps
from aiops.datapath.policy import LANES, LaneName, Policy, match_text
from aiops.errors import InputError
from collectors.ebpf.tcp_probe import TcpFlowSample, TcpProbe

TRAFFIC_CLASS: dict[str, str] = {"vip": "collective", "bulk": "bulk", "standard": "other"}


def _delta(after: Any, before: Any) -> tuple[int, int, int]:
    """(bytes, packets, ce_marks) since `before`; a slot that went down was reset (reused by a new rule)."""
    if after.packets < before.packets:
        return int(after.bytes), int(after.packets), int(after.ce_marks)
    return (
        int(after.bytes - before.bytes),
        int(after.packets - before.packets),
        int(after.ce_marks - before.ce_marks),
    )


class LaneTelemetry:
    """The `Collector` of one NIC with lanes (name, collect(now_ts_s) -> {table: Arrow table})."""

    name = "ebpf_lanes"

    def __init__(
        self, state: LanesState, policy: Policy, *, node: str, nic: str, tcp: TcpProbe | None = None
    ):
        self.state, self.policy, self.node, self.nic, self.tcp = state, policy, node, nic, tcp
        self.maps = LaneMaps(Path(state.pin_dir))
        self.slots = state.rule_slots or {rule.rule_id: i for i, rule in enumerate(policy.rules)}
        self.slot_count = max(self.slots.values()) + 1
        self._previous: tuple[float, list[list[Any]], dict[int, dict[str, float]]] | None = None
        self.last_flows: list[
            dict[str, Any]
        ] = []  # per-flow TCP aggregates of the last interval (JSON-ready)

    def close(self) -> None:
        self.maps.close()

    def lane_rules(self, now_ts_s: float) -> pa.Table:
        rules = self.policy.rules
        return pa.table(
            {
                "ts_s": [now_ts_s] * len(rules),
                "rule_id": [r.rule_id for r in rules],
                "match_kind": [r.match_kind for r in rules],
                "match_value": [match_text(r) for r in rules],
                "lane": [r.lane for r in rules],
                "scope": [self.nic] * len(rules),
            }
        )

    def _retransmits_by_lane(self, flows: list[TcpFlowSample]) -> dict[LaneName, int]:
        lanes_of = {(f.src, f.dst, f.sport, f.dport): f.lane for f in self.maps.flow_lanes() if f.proto == 6}
        totals: dict[LaneName, int] = dict.fromkeys(LANES, 0)
        self.last_flows = []
        for flow in flows:
            lane = lanes_of.get((flow.src, flow.dst, flow.sport, flow.dport))
            if lane is None:
                continue  # not a connection that left through this NIC's classifier
            totals[lane] += flow.retransmits
            self.last_flows.append({**flow.as_dict(), "lane": lane, "nic": self.nic})
        return totals

    def collect(self, now_ts_s: float | None = None) -> dict[str, pa.Table]:
        now = time.time() if now_ts_s is None else now_ts_s
        slots = self.maps.slot_counters(self.slot_count)
        classes = tc.class_stats(self.state.dev, self.state.netns)
        flows = self.tcp.read() if self.tcp is not None else []
        previous, self._previous = self._previous, (now, slots, classes)
        if previous is None:
            return {"lane_rules": self.lane_rules(now)}
        before_ts, before_slots, before_classes = previous
        interval_s = max(now - before_ts, 1e-9)
        retransmits = self._retransmits_by_lane(flows)
        nic: dict[str, list[Any]] = {
            k: []
            for k in (
                "ts_s",
                "nic",
                "node",
                "lane",
                "interval_s",
                "tx_bytes",
                "tx_packets",
                "drops",
                "ce_marks",
                "retransmits",
                "queue_delay_ms",
                "lane_rate_bps",
                "link_up",
            )
        }
        for lane_index, lane in enumerate(LANES):
            sent = [_delta(slots[r][lane_index], before_slots[r][lane_index]) for r in range(len(slots))]
            htb = classes.get(tc.LANE_MINORS[lane], {})
            htb_before = before_classes.get(tc.LANE_MINORS[lane], {})
            ceil_bps = htb.get("ceil_bps") or 0.0
            nic["ts_s"].append(now)
            nic["nic"].append(self.nic)
            nic["node"].append(self.node)
            nic["lane"].append(lane)
            nic["interval_s"].append(interval_s)
            nic["tx_bytes"].append(sum(d[0] for d in sent))
            nic["tx_packets"].append(sum(d[1] for d in sent))
            nic["drops"].append(int(htb.get("drops", 0) - htb_before.get("drops", 0)))
            nic["ce_marks"].append(sum(d[2] for d in sent))
            nic["retransmits"].append(retransmits[lane] if self.tcp is not None else None)
            # queueing delay estimate: the HTB class backlog drained at the lane's ceiling
            backlog = htb.get("backlog_bytes", 0.0)
            nic["queue_delay_ms"].append(backlog * 8 / ceil_bps * 1000 if ceil_bps else None)
            nic["lane_rate_bps"].append(ceil_bps or None)
            nic["link_up"].append(True)
        flow: dict[str, list[Any]] = {
            k: []
            for k in ("ts_s", "nic", "node", "traffic_class", "rule_id", "lane", "interval_s", "tx_bytes")
        }
        for rule in self.policy.rules:
            slot = self.slots[rule.rule_id]
            for lane_index, lane in enumerate(LANES):
                sent_bytes = _delta(slots[slot][lane_index], before_slots[slot][lane_index])[0]
                if sent_bytes <= 0:
                    continue
                flow["ts_s"].append(now)
                flow["nic"].append(self.nic)
                flow["node"].append(self.node)
                flow["traffic_class"].append(TRAFFIC_CLASS[lane])
                flow["rule_id"].append(rule.rule_id)
                flow["lane"].append(lane)
                flow["interval_s"].append(interval_s)
                flow["tx_bytes"].append(sent_bytes)
        batches = {"nic_samples": pa.table(nic)}
        if flow["ts_s"]:
            batches["flow_class_samples"] = pa.table(flow)
        return batches


class FlowTelemetry(Protocol):
    """What `collect_lanes` samples: a collector whose last collect also left per-flow aggregates."""

    last_flows: list[dict[str, Any]]

    def collect(self, now_ts_s: float | None = None) -> dict[str, pa.Table]: ...


def collect_lanes(
    telemetry: FlowTelemetry,
    write: Callable[[dict[str, pa.Table]], int],
    *,
    interval_s: float,
    duration_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_flows: Callable[[list[dict[str, Any]]], object] | None = None,
) -> int:
    """Collect every `interval_s` until `duration_s` has passed on `clock`; returns the rows `write` took.

    Each batch goes to `write` (e.g. `Store.ingest_many`), each interval's flows to `on_flows`. The first
    collect only primes the counters, so a run makes at least two collects (one interval of rows, however
    slowly the first collect and write ran) and at most duration_s / interval_s + 2, however slowly the clock
    moves.
    """
    if interval_s <= 0:
        raise InputError("lanes collect", "interval_s", f"must be positive, not {interval_s:g}")
    rows = 0
    deadline = clock() + duration_s
    for collects in range(1, int(duration_s / interval_s) + 3):
        rows += write(telemetry.collect())
        if on_flows is not None:
            on_flows(telemetry.last_flows)
        if clock() >= deadline and collects >= 2:
            break
        sleep(interval_s)
    return rows
