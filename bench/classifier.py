"""Cost of the lanes classifier per packet, measured in the kernel with BPF_PROG_TEST_RUN.

The lanes program runs with the default policy's rules (plus explicit 5-tuple rules) over an IPv4/UDP packet
to a storage address: it walks the 5-tuple stages, the DSCP table, the cgroup stage (no socket: skipped)
and the LPM trie, lands in bulk, checks the lane's ECN budget and counts. Next to it, in the same run, an
empty tc program gives the harness's own cost; overhead_ns is the difference of medians.

Prints {"lanes_ns_per_pkt", "empty_ns_per_pkt", "overhead_ns"}; details on stderr. Needs root and bcc.
"""

from __future__ import annotations

import json
import statistics
import struct
import sys

from aiops.control.policy import load_default_policy, parse_policy
from collectors.ebpf import bpf_sys
from collectors.ebpf.lanes_abi import MAPS
from collectors.ebpf.lanes_maps import LaneMaps, compile_policy
from collectors.ebpf.loader import load_test_programs

REPEAT = 200_000
ROUNDS = 7


def udp_packet(src: bytes, dst: bytes, sport: int, dport: int, payload_bytes: int = 64) -> bytes:
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    udp_len = 8 + payload_bytes
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 1, 0, 64, 17, 0, src, dst)
    udp = struct.pack("!HHHH", sport, dport, udp_len, 0)
    return eth + ip + udp + b"\x00" * payload_bytes


def main() -> int:
    objects, lanes_fd, empty_fd = load_test_programs()
    lanes_object = objects[0]
    base = load_default_policy().model_dump(mode="json")
    tuples = [{"rule_id": f"tuple-{i}", "match_kind": "five_tuple", "proto": "tcp", "dst": f"198.18.2.{i}",
               "dport": 5000 + i, "lane": "vip"} for i in range(1, 9)]  # fmt: skip
    base["rules"] = tuples + base["rules"]
    policy = parse_policy(base, "<bench>")
    fds = {spec.name: int(lanes_object[spec.name.encode()].map_fd) for spec in MAPS}
    with LaneMaps(fds=fds) as maps:
        maps.sync(compile_policy(policy, {"vip": 0x10010, "standard": 0x10020, "bulk": 0x10030}))
        maps.set_budget("bulk", 1_250_000_000, 2_000_000)
    packet = udp_packet(bytes([198, 18, 0, 1]), bytes([198, 19, 0, 9]), 40000, 2049)
    lanes_ns: list[float] = []
    empty_ns: list[float] = []
    retval = 0
    for _ in range(ROUNDS):  # interleaved, so drift in CPU frequency hits both alike
        run = bpf_sys.prog_test_run(lanes_fd, packet, REPEAT)
        retval = run.retval
        lanes_ns.append(run.duration_ns)
        empty_ns.append(bpf_sys.prog_test_run(empty_fd, packet, REPEAT).duration_ns)
    lanes_median, empty_median = statistics.median(lanes_ns), statistics.median(empty_ns)
    print(f"classifier returned class {retval >> 16:x}:{retval & 0xFFFF:x}; rounds lanes={lanes_ns} "
          f"empty={empty_ns} (ns per packet, repeat {REPEAT})", file=sys.stderr)  # fmt: skip
    print(json.dumps({"lanes_ns_per_pkt": lanes_median, "empty_ns_per_pkt": empty_median,
                      "overhead_ns": lanes_median - empty_median}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
