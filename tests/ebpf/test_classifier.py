"""The lanes classifier on a real veth: every classification kind, live updates, ECN marks, flow lanes."""

from __future__ import annotations

import json
import sys

import pytest

from aiops.datapath import lanes
from aiops.store import Store
from collectors.ebpf.tcp_probe import TcpProbe
from collectors.ebpf.telemetry import LaneTelemetry
from tests.ebpf.conftest import LabNic, policy_with

pytestmark = pytest.mark.ebpf


def deltas(nic: LabNic, send: object) -> tuple[dict[str, float], dict[str, tuple[int, int]], list[int]]:
    """Run `send()`; return HTB class packet deltas, lane counter deltas and rule packet deltas."""
    with nic.maps() as maps:
        classes_before = nic.class_packets()
        lanes_before = maps.lane_counters()
        rules_before = maps.rule_counters(256)
        send()  # type: ignore[operator]
        classes_after = nic.class_packets()
        lanes_after = maps.lane_counters()
        rules_after = maps.rule_counters(256)
    classes = {lane: classes_after[lane] - classes_before[lane] for lane in classes_after}
    lane_counts = {
        lane: (
            lanes_after[lane].packets - lanes_before[lane].packets,
            lanes_after[lane].bytes - lanes_before[lane].bytes,
        )
        for lane in lanes_after
    }
    rules = [a.packets - b.packets for a, b in zip(rules_after, rules_before, strict=True)]
    return classes, lane_counts, rules


KINDS = [
    pytest.param(
        {
            "rule_id": "tuple-any-src",
            "match_kind": "five_tuple",
            "proto": "udp",
            "dst": "PEER",
            "dport": 7001,
            "lane": "bulk",
        },
        {"dport": 7001},
        "bulk",
        id="five_tuple-any-src",
    ),
    pytest.param(
        {
            "rule_id": "tuple-any-sport",
            "match_kind": "five_tuple",
            "proto": "udp",
            "src": "SELF",
            "dst": "PEER",
            "dport": 7002,
            "lane": "vip",
        },
        {"dport": 7002},
        "vip",
        id="five_tuple-any-sport",
    ),
    pytest.param(
        {
            "rule_id": "tuple-exact",
            "match_kind": "five_tuple",
            "proto": "udp",
            "src": "SELF",
            "sport": 40404,
            "dst": "PEER",
            "dport": 7003,
            "lane": "bulk",
        },
        {"dport": 7003, "sport": 40404},
        "bulk",
        id="five_tuple-exact",
    ),
    pytest.param(
        {"rule_id": "collective-dscp", "match_kind": "dscp", "dscp": [46], "lane": "vip"},
        {"dport": 7004, "tos": 46 << 2},
        "vip",
        id="dscp",
    ),
    pytest.param(
        {"rule_id": "collective-cgroup", "match_kind": "cgroup", "cgroups": ["TRAINER"], "lane": "vip"},
        {"dport": 7005, "cgroup": "trainer"},
        "vip",
        id="cgroup",
    ),
    pytest.param(
        {"rule_id": "storage-prefix", "match_kind": "dst_prefix", "prefixes": ["STORAGE/32"], "lane": "bulk"},
        {"dport": 7006, "dst": "storage"},
        "bulk",
        id="dst_prefix",
    ),
    pytest.param(None, {"dport": 7007, "dst": "other"}, "standard", id="default"),
]


@pytest.mark.parametrize(("rule", "flow", "lane"), KINDS)
def test_each_kind_lands_in_its_lane(
    lab_nic: LabNic, rule: dict[str, object] | None, flow: dict[str, object], lane: str
) -> None:
    nic = lab_nic
    decoys = [  # rules of other kinds that must not match this flow
        {"rule_id": "decoy-dscp", "match_kind": "dscp", "dscp": [10], "lane": "bulk"},
        {"rule_id": "decoy-prefix", "match_kind": "dst_prefix", "prefixes": ["198.19.0.0/16"], "lane": "vip"},
    ]
    rules = ([] if rule is None else [_resolve(nic, rule)]) + decoys
    policy = policy_with(rules)
    assert nic.apply(policy).action == "updated"  # a live map update, no reload
    dst = {"storage": nic.storage_ip, "other": nic.other_ip}.get(str(flow.get("dst")), nic.peer_ip)
    cgroup = nic.trainer_cgroup if flow.get("cgroup") == "trainer" else None
    extra = {k: int(v) for k, v in flow.items() if k in ("sport", "tos")}  # type: ignore[call-overload]
    count = 25

    classes, lane_counts, rule_packets = deltas(
        nic,
        lambda: nic.send_udp(dst, int(flow["dport"]), count=count, cgroup=cgroup, **extra),  # type: ignore[call-overload]
    )
    matched = nic.slot(str(rule["rule_id"]) if rule else "default")
    assert rule_packets[matched] == count
    assert lane_counts[lane][0] == count
    assert lane_counts[lane][1] == count * (200 + 42)  # payload + UDP/IPv4/Ethernet headers
    assert classes[lane] >= count  # the HTB class the program returned
    for other in ("vip", "standard", "bulk"):
        if other != lane:
            assert lane_counts[other][0] == 0


def _resolve(nic: LabNic, rule: dict[str, object]) -> dict[str, object]:
    text = json.dumps(rule)
    text = text.replace("PEER", nic.peer_ip).replace("SELF", nic.peer_ip.rsplit(".", 1)[0] + ".1")
    text = text.replace("STORAGE", nic.storage_ip).replace(
        "TRAINER", nic.sandbox.cgroup_rel(nic.trainer_cgroup)
    )
    resolved: dict[str, object] = json.loads(text)
    return resolved


def test_first_match_wins_in_datapath_order(lab_nic: LabNic) -> None:
    """A flow that matches a DSCP rule and a prefix rule takes the DSCP rule (DSCP comes first)."""
    nic = lab_nic
    policy = policy_with(
        [
            {
                "rule_id": "peer-prefix",
                "match_kind": "dst_prefix",
                "prefixes": [f"{nic.peer_ip}/32"],
                "lane": "vip",
            },
            {"rule_id": "bulk-dscp", "match_kind": "dscp", "dscp": [8], "lane": "bulk"},
        ]
    )
    nic.apply(policy)
    _, lane_counts, rules = deltas(nic, lambda: nic.send_udp(nic.peer_ip, 7010, count=10, tos=8 << 2))
    assert rules[nic.slot("bulk-dscp")] == 10
    assert lane_counts["bulk"][0] == 10


def test_live_update_moves_a_running_flow(lab_nic: LabNic) -> None:
    nic = lab_nic
    nic.apply(policy_with([]))
    process = nic.sandbox.python(
        nic.sender, ["udp", "--dst", nic.peer_ip, "--dport", "7020", "--count", "400", "--interval-ms", "5"]
    )
    try:
        with nic.maps() as maps:
            first = maps.lane_counters()
            import time

            time.sleep(0.6)
            middle = maps.lane_counters()
            moved = policy_with(
                [
                    {
                        "rule_id": "move-me",
                        "match_kind": "five_tuple",
                        "proto": "udp",
                        "dst": nic.peer_ip,
                        "dport": 7020,
                        "lane": "bulk",
                    }
                ]
            )
            assert nic.apply(moved).action == "updated"
            time.sleep(0.6)
            last = maps.lane_counters()
    finally:
        process.communicate(timeout=30)
    assert middle["standard"].packets - first["standard"].packets > 20
    assert last["bulk"].packets - middle["bulk"].packets > 20
    assert middle["bulk"].packets == first["bulk"].packets


SAME_SOCKET_SENDER = """
import socket, sys
dst_a, dst_b, port, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # one unconnected socket for every packet below
for i in range(count):  # alternating peers: the socket cache must not carry one peer's lane to the other
    s.sendto(b"x" * 200, (dst_a if i % 2 == 0 else dst_b, port))
s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 46 << 2)  # same socket, same peer, new DSCP
for _ in range(count):
    s.sendto(b"x" * 200, (dst_b, port))
"""


def test_socket_cache_follows_each_packet(lab_nic: LabNic) -> None:
    """One socket that changes peer every packet, then its DSCP: each packet lands where its own headers
    say (the per-socket decision cache is keyed by tuple, DSCP and rule generation)."""
    nic = lab_nic
    rules = [
        {
            "rule_id": "storage-prefix",
            "match_kind": "dst_prefix",
            "prefixes": [f"{nic.storage_ip}/32"],
            "lane": "bulk",
        },
        {"rule_id": "collective-dscp", "match_kind": "dscp", "dscp": [46], "lane": "vip"},
    ]
    assert nic.apply(policy_with(rules)).action == "updated"
    count = 40

    def send() -> None:
        argv = [sys.executable, "-c", SAME_SOCKET_SENDER, nic.storage_ip, nic.other_ip, "7050", str(count)]
        process = nic.sandbox.spawn(nic.sender, argv)
        assert process.wait(timeout=30) == 0

    _, lane_counts, rule_packets = deltas(nic, send)
    assert lane_counts["bulk"][0] == count // 2  # to storage
    assert lane_counts["standard"][0] == count // 2  # to the other host, plain DSCP
    assert lane_counts["vip"][0] == count  # to the other host after IP_TOS 0xb8
    assert rule_packets[nic.slot("collective-dscp")] == count


def test_ecn_marks_bulk_over_budget_and_records_flow_lane(lab_nic: LabNic) -> None:
    """A TCP bulk stream over its lane's budget gets CE marks (ECT via tcp_ecn=1); its SYN records the lane."""
    nic = lab_nic
    policy = policy_with(
        [
            {
                "rule_id": "bulk-port",
                "match_kind": "five_tuple",
                "proto": "tcp",
                "dst": nic.peer_ip,
                "dport": 7030,
                "lane": "bulk",
            }
        ],
        lanes={
            "vip": {"min_mbps": 40, "prio": 0},
            "standard": {"min_mbps": 10, "prio": 1},
            "bulk": {"min_mbps": 10, "ceil_mbps": 20, "prio": 2},
        },
        ecn={"enabled": True, "threshold_ms": 1},
    )
    nic.apply(policy)
    server = nic.sandbox.python(nic.receiver, ["bulk-server", "--port", "7030", "--max-s", "20"])
    assert server.stdout is not None
    server.stdout.readline()  # listening
    with nic.maps() as maps:
        before = maps.lane_counters()["bulk"]
        client = nic.sandbox.python(
            nic.sender,
            ["bulk-client", "--dst", nic.peer_ip, "--port", "7030", "--streams", "1", "--duration-s", "2"],
        )
        client.communicate(timeout=30)
        after = maps.lane_counters()["bulk"]
        flows = maps.flow_lanes()
    nic.sandbox.stop(server)
    assert after.packets - before.packets > 100
    assert after.ce_marks - before.ce_marks > 0
    assert any(f.dport == 7030 and f.lane == "bulk" and f.dst == nic.peer_ip for f in flows)


def test_telemetry_lands_in_the_store(lab_nic: LabNic) -> None:
    """Lane counters -> nic_samples, rule counters -> flow_class_samples, tcp_probe srtt/cwnd per flow."""
    nic = lab_nic
    policy = policy_with(
        [
            {
                "rule_id": "storage-prefix",
                "match_kind": "dst_prefix",
                "prefixes": [f"{nic.storage_ip}/32"],
                "lane": "bulk",
            }
        ]
    )
    nic.apply(policy)
    state = lanes.read_state(lanes.state_key(nic.dev, nic.sender))
    assert state is not None
    server = nic.sandbox.python(nic.receiver, ["bulk-server", "--port", "7040", "--max-s", "20"])
    assert server.stdout is not None
    server.stdout.readline()
    tcp = TcpProbe()
    telemetry = LaneTelemetry(state, policy, node="node0", nic="node0/nic0", tcp=tcp)
    try:
        with Store(":memory:") as store:
            store.ingest_many(telemetry.collect(1000.0))
            client = nic.sandbox.python(
                nic.sender,
                [
                    "bulk-client",
                    "--dst",
                    nic.storage_ip,
                    "--port",
                    "7040",
                    "--streams",
                    "1",
                    "--duration-s",
                    "1",
                ],
            )
            client.communicate(timeout=30)
            store.ingest_many(telemetry.collect(1001.0))
            bulk = store.query("SELECT * FROM nic_samples WHERE lane = 'bulk'")
            classes = store.query("SELECT * FROM flow_class_samples WHERE rule_id = 'storage-prefix'")
            rules = store.scalar("SELECT count(*) FROM lane_rules WHERE scope = 'node0/nic0'")
    finally:
        telemetry.close()
        tcp.close()
        nic.sandbox.stop(server)
    assert len(bulk) == 1 and bulk[0]["tx_bytes"] > 100_000 and bulk[0]["interval_s"] == 1.0
    assert bulk[0]["retransmits"] is not None
    assert classes and classes[0]["traffic_class"] == "bulk" and classes[0]["lane"] == "bulk"
    assert rules == 2
    flows = [f for f in telemetry.last_flows if f["dport"] == 7040]
    assert flows and flows[0]["lane"] == "bulk" and flows[0]["samples"] > 0 and flows[0]["srtt_us_mean"] > 0
    assert flows[0]["cwnd_last"] > 0


def test_rule_counters_follow_rule_ids_across_updates(lab_nic: LabNic) -> None:
    """A live update that reorders, removes and adds rules keeps each rule's counters with its rule id."""
    nic = lab_nic
    first = policy_with(
        [
            {"rule_id": "keep-me", "match_kind": "dscp", "dscp": [12], "lane": "bulk"},
            {"rule_id": "drop-me", "match_kind": "dscp", "dscp": [14], "lane": "bulk"},
        ]
    )
    nic.apply(first)
    nic.send_udp(nic.peer_ip, 7050, count=5, tos=12 << 2)
    kept_slot = nic.slot("keep-me")
    with nic.maps() as maps:
        kept_before = maps.rule_counters(256)[kept_slot].packets
    second = policy_with(
        [
            {"rule_id": "new-rule", "match_kind": "dscp", "dscp": [16], "lane": "vip"},
            {"rule_id": "keep-me", "match_kind": "dscp", "dscp": [12], "lane": "bulk"},
        ]
    )
    nic.apply(second)
    assert nic.slot("keep-me") == kept_slot
    with nic.maps() as maps:
        counters = maps.rule_counters(256)
    assert counters[kept_slot].packets == kept_before
    assert counters[nic.slot("new-rule")].packets == 0  # a reused slot starts from zero
