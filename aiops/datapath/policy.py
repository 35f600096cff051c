"""The lanes policy: lane rates, classification rules, ECN and controller settings (YAML, pydantic).

The same model drives the eBPF datapath (`aiops lanes apply`) and the simulator: `classify` below is the
datapath's decision procedure in pure Python (bpf/lanes.bpf.c, same order, same tie-breaks).

Classification, first match wins, by kind: five_tuple, dscp, cgroup, dst_prefix, default. Within
dst_prefix the longest prefix wins (LPM trie); within five_tuple an exact rule beats one with any source
port, which beats one with any source.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from aiops.errors import PolicyError
from aiops.safeload import load_file

_R = TypeVar("_R", bound="_Rule")
LaneName = Literal["vip", "standard", "bulk"]
LANES: tuple[LaneName, ...] = ("vip", "standard", "bulk")
MATCH_KINDS: tuple[str, ...] = ("five_tuple", "dscp", "cgroup", "dst_prefix", "default")
MAX_RULES = 256  # bpf/lanes.h MAX_RULES: per-rule counter slots
DEFAULT_POLICY_PATH = Path(__file__).with_name("default_policy.yaml")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LaneSpec(_Strict):
    min_mbps: float = Field(gt=0)  # HTB rate: guaranteed
    ceil_mbps: float | None = Field(default=None, gt=0)  # HTB ceil: what it may borrow; None = link_mbps
    prio: int = Field(ge=0, le=7)  # HTB prio: lower borrows first


class Lanes(_Strict):
    vip: LaneSpec = LaneSpec(min_mbps=40, prio=0)
    standard: LaneSpec = LaneSpec(min_mbps=20, prio=1)
    bulk: LaneSpec = LaneSpec(min_mbps=20, prio=2)

    def spec(self, lane: LaneName) -> LaneSpec:
        spec: LaneSpec = getattr(self, lane)
        return spec


class _Rule(_Strict):
    rule_id: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")
    lane: LaneName


class FiveTupleRule(_Rule):
    match_kind: Literal["five_tuple"]
    proto: Literal["tcp", "udp"]
    dst: str
    dport: int = Field(ge=1, le=65535)
    src: str | None = None  # None: any source address (then sport must be None too)
    sport: int | None = Field(default=None, ge=1, le=65535)  # None: any source port (NCCL: ephemeral)

    @field_validator("dst", "src")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return None if value is None else str(ipaddress.ip_address(value))

    @model_validator(mode="after")
    def _shape(self) -> FiveTupleRule:
        if self.src is None and self.sport is not None:
            raise ValueError("sport needs src: the datapath has no 'any source address, fixed port' stage")
        return self


class DscpRule(_Rule):
    match_kind: Literal["dscp"]
    dscp: list[Annotated[int, Field(ge=0, le=63)]] = Field(min_length=1)


class CgroupRule(_Rule):
    match_kind: Literal["cgroup"]
    cgroups: list[str] = Field(min_length=1)  # paths below the cgroup v2 mount, e.g. /nccl.slice

    @field_validator("cgroups")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"cgroup path '{path}' must start with / and stay below the mount")
        return paths


class PrefixRule(_Rule):
    match_kind: Literal["dst_prefix"]
    prefixes: list[str] = Field(min_length=1)

    @field_validator("prefixes")
    @classmethod
    def _networks(cls, prefixes: list[str]) -> list[str]:
        return [str(ipaddress.ip_network(p, strict=False)) for p in prefixes]


class DefaultRule(_Rule):
    match_kind: Literal["default"]


Rule = Annotated[
    FiveTupleRule | DscpRule | CgroupRule | PrefixRule | DefaultRule, Field(discriminator="match_kind")
]


class Ecn(_Strict):
    enabled: bool = True
    threshold_ms: float = Field(default=5.0, gt=0, le=1000)  # virtual-queue depth before CE marks


class Adaptive(_Strict):
    enabled: bool = True
    interval_s: float = Field(default=0.2, ge=0.01, le=60)
    vip_headroom_ratio: float = Field(default=1.5, ge=1.0, le=10)  # VIP reserve = demand x ratio
    vip_floor_mbps: float = Field(default=10, gt=0)  # the VIP reserve never goes below this
    smoothing: float = Field(default=0.5, gt=0, le=1)  # EWMA weight of the newest demand sample
    forecast_lead_s: float = Field(default=5.0, ge=0, le=3600)  # shrink bulk this long before a checkpoint
    forecast_bulk_share: float = Field(default=0.5, gt=0, le=1)  # bulk's ceiling share while a spike is due


class Policy(_Strict):
    link_mbps: float = Field(gt=0)
    lanes: Lanes = Lanes()
    vip_dscp: int | None = Field(default=None, ge=0, le=63)
    ecn: Ecn = Ecn()
    adaptive: Adaptive = Adaptive()
    rules: list[Rule] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        if len(self.rules) > MAX_RULES:
            raise ValueError(f"{len(self.rules)} rules; the datapath has {MAX_RULES} rule slots")
        ids = [r.rule_id for r in self.rules]
        duplicated = sorted({i for i in ids if ids.count(i) > 1})
        if duplicated:
            raise ValueError(f"rule_id repeated: {', '.join(duplicated)}")
        defaults = [r for r in self.rules if r.match_kind == "default"]
        if len(defaults) != 1:
            raise ValueError(f"exactly one rule with match_kind default is needed, found {len(defaults)}")
        _unique(self.rules, DscpRule, lambda r: [str(d) for d in r.dscp], "dscp")
        _unique(self.rules, CgroupRule, lambda r: list(r.cgroups), "cgroup")
        _unique(self.rules, PrefixRule, lambda r: list(r.prefixes), "prefix")
        _unique(self.rules, FiveTupleRule, lambda r: [_tuple_text(r)], "five_tuple")
        floor = sum(self.lanes.spec(lane).min_mbps for lane in LANES)
        if floor > self.link_mbps:
            raise ValueError(f"lane min_mbps add up to {floor:g}, more than link_mbps {self.link_mbps:g}")
        return self

    def rule_index(self, rule_id: str) -> int:
        return [r.rule_id for r in self.rules].index(rule_id)

    @property
    def default_rule(self) -> DefaultRule:
        return next(r for r in self.rules if isinstance(r, DefaultRule))

    def ceil_mbps(self, lane: LaneName) -> float:
        spec = self.lanes.spec(lane)
        return min(spec.ceil_mbps or self.link_mbps, self.link_mbps)


def _tuple_text(rule: FiveTupleRule) -> str:
    return f"{rule.proto} {rule.src or '*'}:{rule.sport or '*'} -> {rule.dst}:{rule.dport}"


def match_text(rule: Rule) -> str | None:
    """A rule's match as one string: the `match_value` of the lane_rules table (None for the default)."""
    if isinstance(rule, FiveTupleRule):
        return _tuple_text(rule)
    if isinstance(rule, DscpRule):
        return ",".join(str(d) for d in rule.dscp)
    if isinstance(rule, CgroupRule):
        return ",".join(rule.cgroups)
    if isinstance(rule, PrefixRule):
        return ",".join(rule.prefixes)
    return None


def _unique(rules: Sequence[Any], kind: type[_R], values: Any, what: str) -> None:
    seen: dict[str, str] = {}
    for rule in [r for r in rules if isinstance(r, kind)]:
        for value in values(rule):
            if value in seen:
                raise ValueError(f"{what} {value} is in rules {seen[value]} and {rule.rule_id}")
            seen[value] = rule.rule_id


def _field_name(loc: Sequence[int | str]) -> str:
    text = ""
    previous: int | str | None = None
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in MATCH_KINDS and isinstance(previous, int) and text.startswith("rules"):
            pass  # pydantic's discriminator step: not a field the user wrote
        else:
            text += f".{part}" if text else str(part)
        previous = part
    return text or "(top level)"


def _allowed(error: Any) -> Sequence[str] | str | None:
    ctx = error.get("ctx") or {}
    if error["type"] == "union_tag_invalid" or error["type"] == "union_tag_not_found":
        return MATCH_KINDS
    if "expected" in ctx:
        return [w for w in re.split(r"[',]+| or ", str(ctx["expected"])) if w.strip()]
    if error["type"] == "extra_forbidden":
        return None
    return None


def parse_policy(data: Any, path: str = "<policy>") -> Policy:
    """Validate parsed YAML; raises PolicyError naming the file, the field and the allowed values."""
    if not isinstance(data, dict):
        raise PolicyError(path, "(top level)", "a policy is a mapping")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = _field_name(error["loc"])
        problem = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "union_tag_invalid":
            field, problem = f"{field}.match_kind", f"unknown match_kind '{error['ctx']['tag']}'"
        elif error["type"] == "union_tag_not_found":
            field, problem = f"{field}.match_kind", "missing"
        if error["type"] == "extra_forbidden":
            problem = "unknown key"
            allowed = _known_keys(data, error["loc"])
            raise PolicyError(path, field, problem, allowed) from None
        raise PolicyError(path, field, problem, _allowed(error)) from None


def _known_keys(data: Any, loc: Sequence[int | str]) -> list[str]:
    model: Any = Policy
    node = data
    for part in loc[:-1]:
        if isinstance(part, int):
            node = node[part]
            kind = node.get("match_kind") if isinstance(node, dict) else None
            model = {
                "five_tuple": FiveTupleRule,
                "dscp": DscpRule,
                "cgroup": CgroupRule,
                "dst_prefix": PrefixRule,
                "default": DefaultRule,
            }.get(str(kind), model)
            continue
        if part in MATCH_KINDS:
            continue
        node = node.get(part) if isinstance(node, dict) else None
        annotation = model.model_fields[part].annotation if part in model.model_fields else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
    return sorted(model.model_fields)


def load_policy(path: str | Path) -> Policy:
    return parse_policy(load_file(path, PolicyError), str(path))


def load_default_policy() -> Policy:
    return load_policy(DEFAULT_POLICY_PATH)


@dataclass(frozen=True)
class Flow:
    """What the datapath sees of a packet; cgroup_path is the sending socket's cgroup (or None)."""

    proto: str
    src: str
    dst: str
    sport: int
    dport: int
    dscp: int = 0
    cgroup_path: str | None = None


def _of_kind(policy: Policy, kind: type[_R]) -> list[_R]:
    return [rule for rule in policy.rules if isinstance(rule, kind)]


def classify(policy: Policy, flow: Flow) -> tuple[str, LaneName]:
    """(rule_id, lane) the datapath picks for `flow`: the pure twin of bpf/lanes.bpf.c."""
    tuples = _of_kind(policy, FiveTupleRule)
    src, dst = str(ipaddress.ip_address(flow.src)), str(ipaddress.ip_address(flow.dst))
    for shape in ("exact", "any_sport", "any_src"):
        for rule in tuples:
            if rule.proto != flow.proto or rule.dst != dst or rule.dport != flow.dport:
                continue
            if shape == "exact" and rule.src == src and rule.sport == flow.sport:
                return rule.rule_id, rule.lane
            if shape == "any_sport" and rule.src == src and rule.sport is None:
                return rule.rule_id, rule.lane
            if shape == "any_src" and rule.src is None:
                return rule.rule_id, rule.lane
    for dscp_rule in _of_kind(policy, DscpRule):
        if flow.dscp in dscp_rule.dscp:
            return dscp_rule.rule_id, dscp_rule.lane
    if flow.cgroup_path is not None:
        best: tuple[int, CgroupRule] | None = None
        for cgroup_rule in _of_kind(policy, CgroupRule):
            for path in cgroup_rule.cgroups:
                base = path.rstrip("/")
                if flow.cgroup_path == base or flow.cgroup_path.startswith(base + "/"):
                    depth = base.count("/")
                    if best is None or depth > best[0]:
                        best = (depth, cgroup_rule)
        if best is not None:
            return best[1].rule_id, best[1].lane
    address = ipaddress.ip_address(dst)
    longest: tuple[int, PrefixRule] | None = None
    for prefix_rule in _of_kind(policy, PrefixRule):
        for prefix in prefix_rule.prefixes:
            network = ipaddress.ip_network(prefix)
            better = longest is None or network.prefixlen > longest[0]
            if network.version == address.version and address in network and better:
                longest = (network.prefixlen, prefix_rule)
    if longest is not None:
        return longest[1].rule_id, longest[1].lane
    fallback = policy.default_rule
    return fallback.rule_id, fallback.lane
