"""Lifecycle of the lanes on one NIC: apply (idempotent), remove (exactly what apply added), status.

What apply adds: a root HTB qdisc (handle 1:) with a parent class 1:1 at link_mbps and one class per lane
(1:10 vip, 1:20 standard, 1:30 bulk), a cls_bpf filter on 1: running the pinned classifier, the pins under
/sys/fs/bpf/aiops/<key>/, and a state file /run/aiops/lanes/<key>.json (key: the device, or DEV@NETNS).

Crash safety: the state file is written before the first change (complete=false) and again after the last.
A later apply that finds an incomplete or stale record, a pin directory without a record, or our HTB root
with our filter, removes that and builds afresh. When no controller runs, the datapath keeps classifying
with the last rules and rates: traffic always flows (the classifier fails open to HTB's default class).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiops.datapath import tc
from aiops.datapath.loader import PROG_PIN_NAME, load_lanes, pin_dir, source_file, unpin
from aiops.datapath.maps import CompiledRules, LaneMaps, assign_slots, compile_policy
from aiops.datapath.policy import LANES, LaneName, Policy, parse_policy
from aiops.datapath.rates import LaneRates
from aiops.errors import AiopsError, PrerequisiteError, TcError

STATE_DIR = Path(os.environ.get("AIOPS_RUN_DIR", "/run/aiops")) / "lanes"
PROGRAM_NAME = "lanes_classify"
SOURCE_FILES = ("lanes.bpf.c", "lanes.h")


def state_key(dev: str, netns: str | None) -> str:
    return f"{dev}@{netns}" if netns else dev


@dataclass
class LanesState:
    dev: str
    netns: str | None
    key: str
    pin_dir: str
    policy_path: str
    policy_sha256: str
    source_sha256: str
    complete: bool
    applied_ts_s: float
    pid: int
    rates: dict[str, list[float]] = field(default_factory=dict)  # lane -> [rate_mbps, ceil_mbps]
    inactive_rules: dict[str, str] = field(default_factory=dict)
    rule_ids: list[str] = field(default_factory=list)
    policy_json: dict[str, Any] = field(default_factory=dict)  # the applied policy, for control and collect
    rule_slots: dict[str, int] = field(
        default_factory=dict
    )  # rule id -> counter slot (stable across updates)

    def path(self) -> Path:
        return STATE_DIR / f"{self.key}.json"

    def save(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        tmp = self.path().with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, self.path())


def read_state(key: str) -> LanesState | None:
    path = STATE_DIR / f"{key}.json"
    try:
        return LanesState(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return None  # a torn or foreign file: treated as stale


def all_states() -> list[LanesState]:
    if not STATE_DIR.is_dir():
        return []
    states = [read_state(p.stem) for p in sorted(STATE_DIR.glob("*.json"))]
    return [s for s in states if s is not None]


def source_sha256() -> str:
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update(source_file(name).read_bytes())
    return digest.hexdigest()


def policy_sha256(policy: Policy) -> str:
    return hashlib.sha256(policy.model_dump_json().encode()).hexdigest()


def applied_policy(state: LanesState) -> Policy:
    """The policy a state record was applied from (as recorded, whatever happened to the file since)."""
    return parse_policy(state.policy_json, f"{state.path()} (policy_json)")


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PrerequisiteError("`aiops lanes` changes qdiscs and BPF maps: run it as root")


def _ours_on_nic(dev: str, netns: str | None) -> bool:
    root = tc.root_qdisc(dev, netns)
    if not root or root.get("kind") != "htb" or root.get("handle") != f"{tc.HTB_MAJOR:x}:":
        return False
    return any(name.startswith(PROGRAM_NAME) for name in tc.filter_names(dev, netns))


def _classids() -> dict[str, int]:
    return {lane: tc.classid(minor) for lane, minor in tc.LANE_MINORS.items()}


def lane_class(lane: LaneName, policy: Policy, rate_mbps: float, ceil_mbps: float) -> tc.HtbClass:
    return tc.HtbClass(tc.LANE_MINORS[lane], rate_mbps, ceil_mbps, policy.lanes.spec(lane).prio)


def actuate_rates(dev: str, netns: str | None, policy: Policy, rates: LaneRates, maps: LaneMaps) -> None:
    """Write lane rates: HTB classes (tc class change) and the ECN budgets in the lane_budget map."""
    threshold_ns = int(policy.ecn.threshold_ms * 1e6)
    for lane in LANES:
        rate_mbps, ceil_mbps = rates.rate_mbps[lane], rates.ceil_mbps[lane]
        tc.change_class(dev, lane_class(lane, policy, rate_mbps, ceil_mbps), netns)
        budget = 0 if lane == "vip" or not policy.ecn.enabled else int(rates.ecn_budget_mbps[lane] * 125_000)
        maps.set_budget(lane, budget, threshold_ns)


@dataclass(frozen=True)
class ApplyResult:
    action: str  # created | updated | replaced
    state: LanesState
    removed_stale: list[str]


def apply(
    dev: str, policy: Policy, policy_path: str, netns: str | None = None, *, rates: LaneRates
) -> ApplyResult:
    """Install or update the lanes on `dev` so that they match `policy`, with lane rates `rates` (what the
    control layer says a NIC starts with: `aiops.control.laws.initial_rates`). Idempotent."""
    _require_root()
    key = state_key(dev, netns)
    directory = pin_dir(key)
    state = read_state(key)
    ours = _ours_on_nic(dev, netns)
    source = source_sha256()
    rule_ids = [r.rule_id for r in policy.rules]
    if state and state.complete and ours and state.source_sha256 == source and directory.exists():
        slots, reused = assign_slots(state.rule_slots, rule_ids)
        compiled = compile_policy(policy, _classids(), slots=slots)
        try:
            with LaneMaps(directory) as maps:
                maps.zero_slots(reused)  # a new rule's counters start from zero
                maps.sync(compiled)
                if state.rates.get("root") != [policy.link_mbps, policy.link_mbps]:
                    root = tc.HtbClass(tc.ROOT_MINOR, policy.link_mbps, policy.link_mbps, 0, parent_minor=0)
                    args = tc._class_args("change", dev, root)
                    args[args.index("parent") + 1] = f"{tc.HTB_MAJOR:x}:"
                    tc.run_tc(args, netns)
                actuate_rates(dev, netns, policy, rates, maps)
        except AiopsError:
            pass  # maps unusable: fall through to a rebuild
        else:
            _fill_state(state, policy, policy_path, compiled.inactive, rates)
            state.rule_slots = slots
            state.save()
            return ApplyResult("updated", state, [])
    removed = _remove_stale(dev, netns, key, ours)
    slots, _ = assign_slots({}, rule_ids)
    compiled = compile_policy(policy, _classids(), slots=slots)
    existing = tc.root_qdisc(dev, netns)
    if existing is not None and not tc.is_default_root(existing):
        raise AiopsError(
            f"{dev}: root qdisc {existing.get('kind')} {existing.get('handle')} was not set up by aiops; "
            "delete it (tc qdisc del dev DEV root) before applying lanes"
        )
    state = LanesState(
        dev, netns, key, str(directory), policy_path, "", source, False, time.time(), os.getpid()
    )
    _fill_state(state, policy, policy_path, compiled.inactive, rates)
    state.rule_slots = slots
    state.save()  # the intent, before the first change
    try:
        _build(dev, netns, key, policy, compiled, rates)
    except BaseException:
        tc.delete_root(dev, netns)
        unpin(key)
        state.path().unlink(missing_ok=True)
        raise
    state.complete = True
    state.save()
    return ApplyResult("replaced" if removed else "created", state, removed)


def _fill_state(
    state: LanesState, policy: Policy, policy_path: str, inactive: dict[str, str], rates: LaneRates
) -> None:
    state.policy_path = policy_path
    state.policy_sha256 = policy_sha256(policy)
    state.applied_ts_s = time.time()
    state.pid = os.getpid()
    state.inactive_rules = dict(inactive)
    state.rule_ids = [r.rule_id for r in policy.rules]
    state.policy_json = policy.model_dump(mode="json")
    state.rates = {lane: [rates.rate_mbps[lane], rates.ceil_mbps[lane]] for lane in LANES}
    state.rates["root"] = [policy.link_mbps, policy.link_mbps]


def _build(
    dev: str, netns: str | None, key: str, policy: Policy, compiled: CompiledRules, rates: LaneRates
) -> None:
    directory = load_lanes(key)
    with LaneMaps(directory) as maps:
        maps.sync(compiled)  # config and rules before the filter sees its first packet
        default_minor = tc.LANE_MINORS[policy.default_rule.lane]
        tc.add_htb_root(dev, policy.link_mbps, default_minor, netns)
        for lane in LANES:
            tc.add_class(dev, lane_class(lane, policy, rates.rate_mbps[lane], rates.ceil_mbps[lane]), netns)
        actuate_rates(dev, netns, policy, rates, maps)
        tc.add_bpf_filter(dev, str(directory / PROG_PIN_NAME), netns)


def _remove_stale(dev: str, netns: str | None, key: str, ours: bool) -> list[str]:
    removed = []
    state = read_state(key)
    if ours or (
        state is not None and not tc.is_default_root(tc.root_qdisc(dev, netns)) and _htb_1(dev, netns)
    ):
        tc.delete_root(dev, netns)
        removed.append(f"htb root 1: on {dev}")
    if unpin(key):
        removed.append(f"pins {key}")
    if state is not None:
        state.path().unlink(missing_ok=True)
        removed.append(f"state {state.path()}")
    return removed


def _htb_1(dev: str, netns: str | None) -> bool:
    root = tc.root_qdisc(dev, netns)
    return bool(root and root.get("kind") == "htb" and root.get("handle") == f"{tc.HTB_MAJOR:x}:")


def nic_gone(dev: str, netns: str | None) -> str | None:
    """Why `dev` (in `netns`) no longer exists, or None when it does: a deleted namespace or device."""
    if netns and not Path(f"/run/netns/{netns}").exists():
        return f"network namespace {netns} is gone"
    try:
        tc.root_qdisc(dev, netns)
    except TcError as exc:
        if "cannot find device" in exc.stderr.lower():
            return f"device {dev} is gone"
        raise
    return None


def remove(dev: str, netns: str | None = None, *, force: bool = False) -> list[str]:
    """Remove what apply added on `dev` (qdisc tree, filter, pins, state); returns what was removed. When the
    device or its namespace is gone (and with it the qdiscs), `force` removes the pins and the record alone."""
    _require_root()
    key = state_key(dev, netns)
    gone = nic_gone(dev, netns)
    if gone is None:
        return _remove_stale(dev, netns, key, _ours_on_nic(dev, netns))
    if not force:
        where = f" --netns {netns}" if netns else ""
        raise AiopsError(
            f"{dev}: {gone}, so its qdiscs went with it; `aiops lanes remove --dev {dev}{where} --force` "
            "removes the pins and the state record"
        )
    removed = []
    if unpin(key):
        removed.append(f"pins {key}")
    state = read_state(key)
    if state is not None:
        state.path().unlink(missing_ok=True)
        removed.append(f"state {state.path()}")
    return removed
