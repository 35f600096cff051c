"""The ECN budget and the socket cache of the lanes program, run in the kernel with BPF_PROG_TEST_RUN.

A test run hands the program the same skb (and the same socket) `repeat` times within microseconds, so the
virtual queue barely drains: the number of CE marks follows from the budget's rate and threshold alone.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import pytest

from aiops.datapath import bpf_sys
from aiops.datapath.abi import MAPS
from aiops.datapath.loader import load_test_programs
from aiops.datapath.maps import LaneMaps, compile_policy
from aiops.datapath.policy import parse_policy
from tests.ebpf.conftest import require_ebpf

pytestmark = pytest.mark.ebpf

CLASSIDS = {"vip": 0x10010, "standard": 0x10020, "bulk": 0x10030}
STORAGE = bytes([198, 19, 0, 9])
PAYLOAD_BYTES = 64
PACKET_BYTES = 14 + 20 + 20 + PAYLOAD_BYTES


def tcp_packet(tos: int) -> bytes:
    """Ethernet + IPv4 + TCP ACK segment from 198.18.0.1:40000 to storage port 2049."""
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, tos, 40 + PAYLOAD_BYTES, 1, 0x4000, 64, 6, 0, bytes([198, 18, 0, 1]), STORAGE
    )
    tcp = struct.pack("!HHIIBBHHH", 40000, 2049, 1, 1, 5 << 4, 0x10, 65535, 0, 0)
    return eth + ip + tcp + b"\x00" * PAYLOAD_BYTES


@pytest.fixture(scope="module")
def program() -> Iterator[tuple[Any, int]]:
    require_ebpf()
    (lanes, _empty), lanes_fd, _empty_fd = load_test_programs()
    policy = parse_policy(
        {
            "link_mbps": 100,
            "rules": [
                {
                    "rule_id": "storage",
                    "match_kind": "dst_prefix",
                    "prefixes": ["198.19.0.0/24"],
                    "lane": "bulk",
                },
                {"rule_id": "default", "match_kind": "default", "lane": "standard"},
            ],
        },
        "<test>",
    )
    with LaneMaps(fds={spec.name: int(lanes[spec.name.encode()].map_fd) for spec in MAPS}) as maps:
        maps.sync(compile_policy(policy, CLASSIDS))
    yield lanes, lanes_fd


def run(program: tuple[Any, int], rate_bytes_per_s: int, threshold_ns: int, tos: int, repeat: int) -> Any:
    """Counter deltas of the bulk lane over one test run of `repeat` packets, from a fresh virtual queue."""
    lanes, fd = program
    with LaneMaps(fds={spec.name: int(lanes[spec.name.encode()].map_fd) for spec in MAPS}) as maps:
        key = (2).to_bytes(4, "little")  # LANE_BULK
        bpf_sys.update(maps.fds["lane_budget"], key, bytes(32))  # empty virtual queue, clock never read
        maps.set_budget("bulk", rate_bytes_per_s, threshold_ns)
        before = maps.lane_counters()["bulk"]
        result = bpf_sys.prog_test_run(fd, tcp_packet(tos), repeat)
        after = maps.lane_counters()["bulk"]
        budget = maps.budget("bulk")
    assert result.retval == CLASSIDS["bulk"]
    return (
        after.packets - before.packets,
        after.ce_marks - before.ce_marks,
        after.not_ect - before.not_ect,
        budget,
    )


def test_a_lane_under_its_budget_is_never_marked(program: tuple[Any, int]) -> None:
    packets, marks, not_ect, budget = run(program, 10**12, 2_000_000, tos=0x02, repeat=100_000)
    assert (packets, marks, not_ect) == (100_000, 0, 0)
    # the virtual queue took every packet's delay without a single clock read (clock_ns is still 0)
    assert budget.clock_ns == 0
    assert budget.vq_until_ns == 100_000 * (PACKET_BYTES * 10**9 // 10**12)


def test_a_lane_over_its_budget_is_marked_after_at_most_two_thresholds(program: tuple[Any, int]) -> None:
    """1 MB/s and a 1 ms threshold: each 118-byte packet adds 118 µs of virtual queue. The exact queue marks
    from the 9th packet; the clock-free path may let through up to 2 x threshold (17 packets)."""
    delay_ns = PACKET_BYTES * 10**9 // 10**6
    packets, marks, not_ect, budget = run(program, 10**6, 1_000_000, tos=0x02, repeat=1_000)
    assert packets == 1_000 and not_ect == 0
    unmarked = packets - marks
    assert 1_000_000 // delay_ns <= unmarked <= 2 * 1_000_000 // delay_ns + 1
    assert budget.clock_ns > 0  # near the threshold the program read the clock


def test_an_unmarkable_packet_over_budget_is_counted_not_marked(program: tuple[Any, int]) -> None:
    packets, marks, not_ect, _ = run(program, 10**6, 1_000_000, tos=0x00, repeat=1_000)
    assert packets == 1_000 and marks == 0
    assert not_ect >= 1_000 - 2 * 1_000_000 // (PACKET_BYTES * 1_000) - 1


def ipv6_tcp_packet(src: str, dst: str, sport: int, dport: int, tclass: int = 0) -> bytes:
    import ipaddress

    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x86\xdd"
    first_word = (6 << 28) | (tclass << 20)
    ip6 = struct.pack("!IHBB", first_word, 20 + PAYLOAD_BYTES, 6, 64)
    ip6 += ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 5 << 4, 0x10, 65535, 0, 0)
    return eth + ip6 + tcp + b"\x00" * PAYLOAD_BYTES


def test_ipv6_packets_are_classified_by_every_stage() -> None:
    """IPv6 keys (16-byte tuples, the IPv6 LPM trie, the traffic class as DSCP) through the same program."""
    require_ebpf()
    (lanes, _empty), fd, _ = load_test_programs()
    policy = parse_policy(
        {
            "link_mbps": 100,
            "rules": [
                {
                    "rule_id": "v6-tuple",
                    "match_kind": "five_tuple",
                    "proto": "tcp",
                    "dst": "2001:db8:2::5",
                    "dport": 5001,
                    "lane": "vip",
                },
                {"rule_id": "v6-dscp", "match_kind": "dscp", "dscp": [46], "lane": "vip"},
                {
                    "rule_id": "v6-storage",
                    "match_kind": "dst_prefix",
                    "prefixes": ["2001:db8:1::/48"],
                    "lane": "bulk",
                },
                {"rule_id": "default", "match_kind": "default", "lane": "standard"},
            ],
        },
        "<test>",
    )
    with LaneMaps(fds={spec.name: int(lanes[spec.name.encode()].map_fd) for spec in MAPS}) as maps:
        maps.sync(compile_policy(policy, CLASSIDS))
    cases = [
        (ipv6_tcp_packet("2001:db8::1", "2001:db8:2::5", 40000, 5001), "vip"),  # 5-tuple, any source
        (ipv6_tcp_packet("2001:db8::1", "2001:db8:2::5", 40000, 5002, tclass=46 << 2), "vip"),  # DSCP
        (ipv6_tcp_packet("2001:db8::1", "2001:db8:1:7::9", 40000, 2049), "bulk"),  # longest prefix
        (ipv6_tcp_packet("2001:db8::1", "2001:db8:9::9", 40000, 2049), "standard"),  # default
    ]
    for packet, lane in cases:
        assert bpf_sys.prog_test_run(fd, packet, 1).retval == CLASSIDS[lane], lane
