"""ctypes mirror of bpf/lanes.h: constants, structs and the maps the loader pins. Change both together;
`LaneMaps` (maps.py) refuses pinned maps whose key or value size differs from these."""

from __future__ import annotations

import ctypes
import ipaddress
from dataclasses import dataclass

LANE_VIP = 0
LANE_STANDARD = 1
LANE_BULK = 2
N_LANES = 3
LANE_NAMES: tuple[str, ...] = ("vip", "standard", "bulk")

MAX_RULES = 256
STATS_SLOTS = MAX_RULES * N_LANES  # stats[rule_index * N_LANES + lane]
MAX_CGROUP_LEVEL = 8

KIND_TUPLE_EXACT = 0x1
KIND_TUPLE_ANY_SPORT = 0x2
KIND_TUPLE_ANY_SRC = 0x4
KIND_DSCP = 0x8
KIND_CGROUP = 0x10
KIND_PREFIX = 0x20

DSCP_KEEP = 0xFF


class LaneMatch(ctypes.Structure):
    _fields_ = (("lane", ctypes.c_uint32), ("rule_index", ctypes.c_uint32))


class Tuple4Key(ctypes.Structure):
    _fields_ = (
        ("saddr", ctypes.c_uint8 * 4),  # network order
        ("daddr", ctypes.c_uint8 * 4),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
        ("proto", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 3),
    )


class Prefix4Key(ctypes.Structure):
    _fields_ = (("prefixlen", ctypes.c_uint32), ("addr", ctypes.c_uint8 * 4))


# The C structs hold addresses as __u32[4] in network order; the same 16 bytes are uint8[16] here.
class TupleKey(ctypes.Structure):
    _fields_ = (
        ("saddr", ctypes.c_uint8 * 16),
        ("daddr", ctypes.c_uint8 * 16),
        ("sport", ctypes.c_uint16),
        ("dport", ctypes.c_uint16),
        ("proto", ctypes.c_uint8),
        ("pad", ctypes.c_uint8 * 3),
    )


class PrefixKey(ctypes.Structure):
    _fields_ = (("prefixlen", ctypes.c_uint32), ("addr", ctypes.c_uint8 * 16))


class DscpEntry(ctypes.Structure):
    _fields_ = (("valid", ctypes.c_uint32), ("match", LaneMatch))


class LanesConfig(ctypes.Structure):
    _fields_ = (
        ("kinds", ctypes.c_uint32),
        ("cgroup_levels", ctypes.c_uint32),
        ("fallback", LaneMatch),
        ("classid", ctypes.c_uint32 * N_LANES),
        ("vip_dscp", ctypes.c_uint32),
        ("ecn_enabled", ctypes.c_uint32),
        ("rule_count", ctypes.c_uint32),
        ("generation", ctypes.c_uint32),
    )


class Counters(ctypes.Structure):
    _fields_ = (
        ("packets", ctypes.c_uint64),
        ("bytes", ctypes.c_uint64),
        ("ce_marks", ctypes.c_uint64),
        ("not_ect", ctypes.c_uint64),
    )


class LaneBudget(ctypes.Structure):
    _fields_ = (
        ("rate_bytes_per_s", ctypes.c_uint64),
        ("threshold_ns", ctypes.c_uint64),
        ("vq_until_ns", ctypes.c_uint64),
        ("clock_ns", ctypes.c_uint64),
    )


U32 = ctypes.c_uint32
U64 = ctypes.c_uint64


@dataclass(frozen=True)
class MapSpec:
    name: str
    key: type[ctypes._SimpleCData[int]] | type[ctypes.Structure]
    value: type[ctypes._SimpleCData[int]] | type[ctypes.Structure]
    per_cpu: bool = False


MAPS: tuple[MapSpec, ...] = (
    MapSpec("config", U32, LanesConfig),
    MapSpec("tuple4_rules", Tuple4Key, LaneMatch),
    MapSpec("tuple6_rules", TupleKey, LaneMatch),
    MapSpec("dscp_rules", U32, DscpEntry),
    MapSpec("cgroup_rules", U64, LaneMatch),
    MapSpec("prefix4_rules", Prefix4Key, LaneMatch),
    MapSpec("prefix6_rules", PrefixKey, LaneMatch),
    MapSpec("stats", U32, Counters, per_cpu=True),
    MapSpec("lane_budget", U32, LaneBudget),
    MapSpec("flow_lane", TupleKey, LaneMatch),
)
MAP_SPECS: dict[str, MapSpec] = {spec.name: spec for spec in MAPS}


def addr16(address: str) -> bytes:
    """16-byte network-order address; IPv4 as v4-mapped IPv6 (RFC 4291 2.5.5.2), like the classifier."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv4Address):
        return b"\x00" * 10 + b"\xff\xff" + ip.packed
    return ip.packed


def prefix_key(network: str) -> tuple[str, Prefix4Key | PrefixKey]:
    """(map name, key) of a destination prefix."""
    net = ipaddress.ip_network(network, strict=False)
    if net.version == 4:
        key4 = Prefix4Key(prefixlen=net.prefixlen)
        key4.addr[:] = list(net.network_address.packed)
        return "prefix4_rules", key4
    key6 = PrefixKey(prefixlen=net.prefixlen)
    key6.addr[:] = list(net.network_address.packed)
    return "prefix6_rules", key6


def tuple_key(
    proto: int, saddr: str | None, daddr: str, sport: int, dport: int
) -> tuple[str, Tuple4Key | TupleKey]:
    """(map name, key) of a 5-tuple rule; saddr None is the any-source wildcard."""
    if ipaddress.ip_address(daddr).version == 4:
        key4 = Tuple4Key(sport=sport, dport=dport, proto=proto)
        if saddr is not None:
            key4.saddr[:] = list(ipaddress.IPv4Address(saddr).packed)
        key4.daddr[:] = list(ipaddress.IPv4Address(daddr).packed)
        return "tuple4_rules", key4
    key6 = TupleKey(sport=sport, dport=dport, proto=proto)
    if saddr is not None:
        key6.saddr[:] = list(addr16(saddr))
    key6.daddr[:] = list(addr16(daddr))
    return "tuple6_rules", key6


def addr_text(raw: bytes) -> str:
    ip = ipaddress.IPv6Address(bytes(raw))
    return str(ip.ipv4_mapped) if ip.ipv4_mapped is not None else str(ip)


def add_counters(total: Counters, part: Counters) -> None:
    total.packets += part.packets
    total.bytes += part.bytes
    total.ce_marks += part.ce_marks
    total.not_ect += part.not_ect


def sum_per_cpu(raw: bytes, cpus: int) -> Counters:
    """Add up a per-CPU `Counters` value (each CPU's slot is rounded up to 8 bytes by the kernel)."""
    slot = (ctypes.sizeof(Counters) + 7) // 8 * 8
    total = Counters()
    for cpu in range(cpus):
        add_counters(total, Counters.from_buffer_copy(raw, cpu * slot))
    return total
