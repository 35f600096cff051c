"""`aiops lanes status`: per-lane and per-rule counters and rates of every NIC with lanes, from the pinned
maps (two reads `interval_s` apart) and the HTB classes (`tc -s class show`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from aiops.datapath import tc
from aiops.datapath.lanes import LanesState, all_states, nic_gone, read_state, state_key
from aiops.datapath.maps import LaneMaps
from aiops.datapath.policy import LANES
from aiops.errors import AbiMismatch, PrerequisiteError, TcError


def nic_status(state: LanesState, interval_s: float = 0.5) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dev": state.dev,
        "netns": state.netns,
        "policy": state.policy_path,
        "applied_ts_s": state.applied_ts_s,
        "complete": state.complete,
    }
    cleanup = (
        f"`aiops lanes remove --dev {state.dev}{f' --netns {state.netns}' if state.netns else ''} --force`"
    )
    gone = nic_gone(state.dev, state.netns)
    if gone is not None:
        out["error"] = f"{gone}: {cleanup} drops the pins and the record"
        return out
    try:
        return _counters(state, interval_s, out)
    except (OSError, AbiMismatch, TcError) as exc:  # BpfError is an OSError: the pins are gone or foreign
        out["error"] = f"pinned maps in {state.pin_dir} cannot be read ({exc}): {cleanup} drops them"
        return out


def _counters(state: LanesState, interval_s: float, out: dict[str, Any]) -> dict[str, Any]:
    slots = state.rule_slots or {rule_id: index for index, rule_id in enumerate(state.rule_ids)}
    rule_count = max(slots.values(), default=-1) + 1
    with LaneMaps(Path(state.pin_dir)) as maps:
        lanes_before, rules_before, t0 = (
            maps.lane_counters(),
            maps.rule_counters(rule_count),
            time.monotonic(),
        )
        time.sleep(max(interval_s, 0.0))
        lanes_after, rules_after, t1 = maps.lane_counters(), maps.rule_counters(rule_count), time.monotonic()
        budgets = {lane: maps.budget(lane) for lane in LANES}
    elapsed_s = max(t1 - t0, 1e-9)
    classes = tc.class_stats(state.dev, state.netns)
    lanes_out: dict[str, Any] = {}
    for lane in LANES:
        after, before = lanes_after[lane], lanes_before[lane]
        htb = classes.get(tc.LANE_MINORS[lane], {})
        lanes_out[lane] = {
            "packets": after.packets,
            "bytes": after.bytes,
            "ce_marks": after.ce_marks,
            "over_budget_not_ect": after.not_ect,
            "mbps": (after.bytes - before.bytes) * 8 / elapsed_s / 1e6,
            "pps": (after.packets - before.packets) / elapsed_s,
            "htb_rate_mbps": htb.get("rate_bps", 0.0) / 1e6,
            "htb_ceil_mbps": htb.get("ceil_bps", 0.0) / 1e6,
            "ecn_budget_mbps": budgets[lane].rate_bytes_per_s * 8 / 1e6,
            "drops": htb.get("drops"),
            "backlog_bytes": htb.get("backlog_bytes"),
        }
    rules_out = []
    for rule_id in state.rule_ids:
        after, before = rules_after[slots[rule_id]], rules_before[slots[rule_id]]
        rules_out.append(
            {
                "rule_id": rule_id,
                "packets": after.packets,
                "bytes": after.bytes,
                "ce_marks": after.ce_marks,
                "mbps": (after.bytes - before.bytes) * 8 / elapsed_s / 1e6,
                "inactive": state.inactive_rules.get(rule_id),
            }
        )
    out.update(lanes=lanes_out, rules=rules_out, interval_s=elapsed_s)
    return out


def status(dev: str | None = None, netns: str | None = None, interval_s: float = 0.5) -> list[dict[str, Any]]:
    if os.geteuid() != 0:
        raise PrerequisiteError(
            "reading the lanes' pinned BPF maps needs root: run `aiops lanes status` as root"
        )
    if dev is not None:
        state = read_state(state_key(dev, netns))
        states = [state] if state is not None else []
    else:
        states = all_states()
    return [nic_status(s, interval_s) for s in states]
