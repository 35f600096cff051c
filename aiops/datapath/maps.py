"""The lanes classifier's pinned maps: compile a policy into map entries, sync them live, read counters.

Only bpf(2) through ctypes (aiops/datapath/bpf_sys.py): no bcc, so a controller or `aiops lanes status`
works from any process once the loader has pinned the maps.
"""

from __future__ import annotations

import ctypes
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from aiops.datapath import bpf_sys
from aiops.datapath.abi import (
    DSCP_KEEP,
    KIND_CGROUP,
    KIND_DSCP,
    KIND_PREFIX,
    KIND_TUPLE_ANY_SPORT,
    KIND_TUPLE_ANY_SRC,
    KIND_TUPLE_EXACT,
    MAP_SPECS,
    MAX_CGROUP_LEVEL,
    MAX_RULES,
    N_LANES,
    U32,
    U64,
    Counters,
    DscpEntry,
    LaneBudget,
    LaneMatch,
    LanesConfig,
    TupleKey,
    add_counters,
    addr_text,
    prefix_key,
    sum_per_cpu,
    tuple_key,
)
from aiops.datapath.policy import (
    LANES,
    CgroupRule,
    DscpRule,
    FiveTupleRule,
    LaneName,
    Policy,
    PrefixRule,
)
from aiops.errors import AbiMismatch

CGROUP2_ROOT = (
    Path("/sys/fs/cgroup/unified") if os.path.isdir("/sys/fs/cgroup/unified") else Path("/sys/fs/cgroup")
)
LANE_INDEX: dict[str, int] = {name: index for index, name in enumerate(LANES)}


@dataclass
class CompiledRules:
    """A policy as map contents. `inactive` lists rules that cannot act here (rule_id -> why)."""

    config: LanesConfig
    hashed: dict[str, dict[bytes, LaneMatch]] = field(
        default_factory=lambda: {
            name: {} for name in ("tuple4_rules", "tuple6_rules", "prefix4_rules", "prefix6_rules")
        }
    )  # map name -> key bytes -> match (5-tuple and prefix maps)
    dscp: dict[int, DscpEntry] = field(default_factory=dict)
    cgroups: dict[int, LaneMatch] = field(default_factory=dict)
    inactive: dict[str, str] = field(default_factory=dict)


def cgroup_id(path: str, root: Path = CGROUP2_ROOT) -> int | None:
    """The cgroup v2 id of `path` below the mount (the kernfs inode number), or None when absent."""
    try:
        return os.stat(root / path.lstrip("/")).st_ino
    except FileNotFoundError:
        return None


def assign_slots(previous: dict[str, int], rule_ids: list[str]) -> tuple[dict[str, int], list[int]]:
    """Counter slots per rule id, stable across live updates: a rule keeps its slot, a new rule takes the
    lowest free one. Returns (slots, slots that changed owner: the caller zeroes them before use)."""
    kept = {rule_id: slot for rule_id, slot in previous.items() if rule_id in rule_ids and slot < MAX_RULES}
    used = set(kept.values())
    free = (slot for slot in range(MAX_RULES) if slot not in used)
    slots = dict(kept)
    reused = []
    for rule_id in rule_ids:
        if rule_id not in slots:
            slots[rule_id] = next(free)
            reused.append(slots[rule_id])
    return slots, reused


def compile_policy(
    policy: Policy,
    classids: dict[str, int],
    cgroup_root: Path = CGROUP2_ROOT,
    slots: dict[str, int] | None = None,
) -> CompiledRules:
    """Map contents for `policy`; `slots` (rule id -> counter slot) default to the rules' positions."""
    slots = slots or {rule.rule_id: index for index, rule in enumerate(policy.rules)}
    cfg = LanesConfig()
    for lane, index in LANE_INDEX.items():
        cfg.classid[index] = classids[lane]
    fallback = policy.default_rule
    cfg.fallback = LaneMatch(LANE_INDEX[fallback.lane], slots[fallback.rule_id])
    cfg.vip_dscp = DSCP_KEEP if policy.vip_dscp is None else policy.vip_dscp
    cfg.ecn_enabled = int(policy.ecn.enabled)
    cfg.rule_count = max(slots.values()) + 1  # readers sum slots below this
    out = CompiledRules(config=cfg)
    for rule in policy.rules:
        match = LaneMatch(LANE_INDEX[rule.lane], slots[rule.rule_id])
        if isinstance(rule, FiveTupleRule):
            proto = socket.IPPROTO_TCP if rule.proto == "tcp" else socket.IPPROTO_UDP
            map_name, key = tuple_key(proto, rule.src, rule.dst, rule.sport or 0, rule.dport)
            out.hashed[map_name][bytes(key)] = match
            if rule.src is None:
                cfg.kinds |= KIND_TUPLE_ANY_SRC
            elif rule.sport is None:
                cfg.kinds |= KIND_TUPLE_ANY_SPORT
            else:
                cfg.kinds |= KIND_TUPLE_EXACT
        elif isinstance(rule, DscpRule):
            for value in rule.dscp:
                out.dscp[value] = DscpEntry(valid=1, match=match)
            cfg.kinds |= KIND_DSCP
        elif isinstance(rule, CgroupRule):
            missing = []
            for path in rule.cgroups:
                ident = cgroup_id(path, cgroup_root)
                if ident is None:
                    missing.append(path)
                    continue
                out.cgroups[ident] = match
                level = len([p for p in path.split("/") if p])
                if 1 <= level <= MAX_CGROUP_LEVEL:
                    cfg.cgroup_levels |= 1 << level
                cfg.kinds |= KIND_CGROUP
            if missing:
                out.inactive[rule.rule_id] = f"no such cgroup below {cgroup_root}: {', '.join(missing)}"
        elif isinstance(rule, PrefixRule):
            for prefix in rule.prefixes:
                map_name, pkey = prefix_key(prefix)
                out.hashed[map_name][bytes(pkey)] = match
            cfg.kinds |= KIND_PREFIX
    return out


@dataclass(frozen=True)
class FlowLane:
    proto: int
    src: str
    dst: str
    sport: int
    dport: int
    lane: LaneName
    rule_index: int


class LaneMaps:
    """Open file descriptors on one pin directory's maps; `close()` (or `with`) releases them."""

    def __init__(self, directory: Path | None = None, fds: dict[str, int] | None = None) -> None:
        """Open the maps pinned in `directory`, or use `fds` of maps a caller holds (then not closed here)."""
        self.directory = directory
        self.cpus = bpf_sys.possible_cpus()
        self.fds: dict[str, int] = {}
        self._owned = fds is None
        try:
            for name, spec in MAP_SPECS.items():
                fd = fds[name] if fds is not None else bpf_sys.obj_get(Path(str(directory)) / name)
                self.fds[name] = fd
                info = bpf_sys.map_info(fd)
                want = (ctypes.sizeof(spec.key), ctypes.sizeof(spec.value))
                if (info.key_size, info.value_size) != want:
                    raise AbiMismatch(
                        f"{directory}/{name}: key/value sizes {info.key_size}/{info.value_size}, "
                        f"aiops/datapath/abi.py expects {want[0]}/{want[1]}: re-run `aiops lanes apply`"
                    )
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._owned:
            for fd in self.fds.values():
                os.close(fd)
        self.fds = {}

    def __enter__(self) -> LaneMaps:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ---------------------------------------------------------------------------------------
    def _sync(self, name: str, desired: dict[bytes, bytes]) -> None:
        fd = self.fds[name]
        key_size = ctypes.sizeof(MAP_SPECS[name].key)
        for key in bpf_sys.keys(fd, key_size):
            if key not in desired:
                bpf_sys.delete(fd, key)
        for key, value in desired.items():
            bpf_sys.update(fd, key, value)

    def sync(self, rules: CompiledRules) -> None:
        """Make the rule maps equal `rules`, live: add and change first, then the config that enables them.

        Removed entries are deleted last-but-one, so a packet never sees a rule set that is neither old nor
        new for longer than one map operation.
        """
        for name, entries in rules.hashed.items():
            self._sync(name, {k: bytes(v) for k, v in entries.items()})
        self._sync("cgroup_rules", {bytes(U64(k)): bytes(v) for k, v in rules.cgroups.items()})
        dscp_fd = self.fds["dscp_rules"]
        for value in range(64):
            entry = rules.dscp.get(value, DscpEntry())
            bpf_sys.update(dscp_fd, bytes(U32(value)), bytes(entry))
        config = LanesConfig.from_buffer_copy(bytes(rules.config))
        # 1..2^32-1, never 0: the datapath's per-socket cache treats generation 0 as "no entry"
        config.generation = self.config().generation % 0xFFFFFFFF + 1
        bpf_sys.update(self.fds["config"], bytes(U32(0)), bytes(config))

    def zero_slots(self, slots: list[int]) -> None:
        """Reset the counters of rule slots (before a new rule takes them over)."""
        zero = bytes(((ctypes.sizeof(Counters) + 7) // 8 * 8) * self.cpus)
        for slot in slots:
            for lane in range(N_LANES):
                bpf_sys.update(self.fds["stats"], bytes(U32(slot * N_LANES + lane)), zero)

    def set_budget(self, lane: LaneName, rate_bytes_per_s: int, threshold_ns: int) -> None:
        """The ECN budget of a lane (rate 0: never mark). Keeps the virtual queue's current state."""
        key = bytes(U32(LANE_INDEX[lane]))
        fd = self.fds["lane_budget"]
        raw = bpf_sys.lookup(fd, key, ctypes.sizeof(LaneBudget))
        budget = LaneBudget.from_buffer_copy(raw) if raw else LaneBudget()
        budget.rate_bytes_per_s = max(rate_bytes_per_s, 0)
        budget.threshold_ns = max(threshold_ns, 0)
        bpf_sys.update(fd, key, bytes(budget))

    # -- reads ----------------------------------------------------------------------------------------
    def config(self) -> LanesConfig:
        raw = bpf_sys.lookup(self.fds["config"], bytes(U32(0)), ctypes.sizeof(LanesConfig))
        return LanesConfig.from_buffer_copy(raw) if raw else LanesConfig()

    def budget(self, lane: LaneName) -> LaneBudget:
        raw = bpf_sys.lookup(self.fds["lane_budget"], bytes(U32(LANE_INDEX[lane])), ctypes.sizeof(LaneBudget))
        return LaneBudget.from_buffer_copy(raw) if raw else LaneBudget()

    def _per_cpu(self, name: str, index: int) -> Counters:
        slot = (ctypes.sizeof(Counters) + 7) // 8 * 8
        raw = bpf_sys.lookup(self.fds[name], bytes(U32(index)), slot * self.cpus)
        return sum_per_cpu(raw, self.cpus) if raw else Counters()

    def slot_counters(self, rule_count: int | None = None) -> list[list[Counters]]:
        """[slot][lane_index] counters for slots below `rule_count` (default: the config's)."""
        count = self.config().rule_count if rule_count is None else rule_count
        return [
            [self._per_cpu("stats", index * N_LANES + lane) for lane in range(N_LANES)]
            for index in range(min(count, MAX_RULES))
        ]

    def lane_counters(self, slots: list[list[Counters]] | None = None) -> dict[LaneName, Counters]:
        slots = self.slot_counters() if slots is None else slots
        totals = {lane: Counters() for lane in LANES}
        for per_lane in slots:
            for lane, part in zip(LANES, per_lane, strict=True):
                add_counters(totals[lane], part)
        return totals

    def rule_counters(self, rule_count: int | None = None) -> list[Counters]:
        totals = []
        for per_lane in self.slot_counters(rule_count):
            total = Counters()
            for part in per_lane:
                add_counters(total, part)
            totals.append(total)
        return totals

    def flow_lanes(self, limit: int = 16384) -> list[FlowLane]:
        """TCP connections the classifier saw a SYN of, with their lane (LRU; oldest evicted)."""
        fd = self.fds["flow_lane"]
        flows = []
        for raw_key in bpf_sys.keys(fd, ctypes.sizeof(TupleKey), limit):
            raw = bpf_sys.lookup(fd, raw_key, ctypes.sizeof(LaneMatch))
            if raw is None:
                continue
            key, match = TupleKey.from_buffer_copy(raw_key), LaneMatch.from_buffer_copy(raw)
            lane: LaneName = LANES[match.lane] if match.lane < len(LANES) else "standard"
            flows.append(
                FlowLane(
                    key.proto,
                    addr_text(bytes(key.saddr)),
                    addr_text(bytes(key.daddr)),
                    key.sport,
                    key.dport,
                    lane,
                    match.rule_index,
                )
            )
        return flows
