"""Issue 24 item 1: the node agent's `/metrics` exports what the cluster analyst reads from a node. The cache is fed
rows as the loop feeds it (`observe(table, columns, rows)` with the collectors' column order) and each new family
is checked for its names, labels and values; then a real `aiops run --sim` on the default twin node (8 GPUs,
2 NICs, one job) is scraped: promtool accepts it without a lint warning, the job/rank families are there, and the
series per GPU and per node are those docs/METRICS.md states, family by family."""

from __future__ import annotations

import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from aiops import nvml_bits
from aiops.service.metrics import MetricsCache
from collectors.schema import columns
from tests.service_helpers import get, require_binary, running_service, wait_for

DOC = Path(__file__).resolve().parents[1] / "docs" / "METRICS.md"
NODE_SCENARIO = """\
name: one-node
seed: 7
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 1, gpus_per_node: 8, nics_per_node: 2}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
"""
Samples = dict[str, list[tuple[dict[str, str], float]]]  # sample name -> (labels, value)


def _row(table: str, **values: Any) -> tuple[Any, ...]:
    return tuple(values.get(c) for c in columns(table))


def _feed(cache: MetricsCache, table: str, rows: Sequence[dict[str, Any]]) -> None:
    cache.observe(table, columns(table), [_row(table, **r) for r in rows])


def _scrape(cache: MetricsCache) -> Samples:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(cache)
    out: Samples = defaultdict(list)
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            out[sample.name].append((dict(sample.labels), float(sample.value)))
    return out


def _value(samples: Samples, name: str, **labels: str) -> float:
    found = [v for got, v in samples[name] if all(got.get(k) == want for k, want in labels.items())]
    assert len(found) == 1, (name, labels, samples[name])
    return found[0]


def _cache() -> MetricsCache:
    cache = MetricsCache("node0")
    cache.inventory(
        [
            {"component": "node0", "kind": "node", "rack": "rack1", "node": "node0", "idx": 0},
            {
                "component": "node0/gpu3",
                "kind": "gpu",
                "rack": "rack1",
                "node": "node0",
                "idx": 3,
                "uuid": None,
            },
            {
                "component": "node0/nic1",
                "kind": "nic",
                "rack": "rack1",
                "node": "node0",
                "idx": 1,
                "device": "eth1",
            },
        ],
        [{"job": "llm", "rank": 11, "gpu": "node0/gpu3", "node": "node0", "nic": "node0/nic1"}],
    )
    return cache


def test_gpu_inventory_limits_and_per_sample_counters() -> None:
    cache = _cache()
    base = {"gpu": "node0/gpu3", "node": "node0", "uuid": "GPU-abc", "power_limit_max_w": 700.0}
    masks = [nvml_bits.HW_THERMAL_SLOWDOWN, nvml_bits.GPU_IDLE, 0, nvml_bits.HW_POWER_BRAKE_SLOWDOWN]
    rows = [dict(base, ts_s=float(t), clocks_event_reasons=m, pcie_link_gen=4) for t, m in enumerate(masks)]
    rows.append(dict(base, ts_s=9.0, nvml_error="GPU_IS_LOST"))
    _feed(cache, "gpu_samples", rows)
    s = _scrape(cache)
    gpu = {"gpu": "node0/gpu3", "node": "node0"}
    assert s["aiops_gpu_info"] == [({**gpu, "rack": "rack1", "index": "3", "uuid": "GPU-abc"}, 1.0)]
    assert s["aiops_node_info"] == [({"node": "node0", "rack": "rack1"}, 1.0)]
    nic = {"node": "node0", "rack": "rack1", "nic": "node0/nic1", "index": "1", "device": "eth1"}
    assert s["aiops_nic_info"] == [(nic, 1.0)]
    rank = {
        "job": "llm",
        "rank": "11",
        "node": "node0",
        "rack": "rack1",
        "gpu": "node0/gpu3",
        "uuid": "GPU-abc",
    }
    assert s["aiops_job_rank_info"] == [({**rank, "nic": "node0/nic1"}, 1.0)]
    assert _value(s, "aiops_gpu_samples_total", **gpu) == 5
    assert (
        _value(s, "aiops_gpu_throttled_samples_total", **gpu) == 2
    )  # thermal and brake; idle is no throttle
    assert _value(s, "aiops_gpu_nvml_error_samples_total", **gpu) == 1
    reasons = {labels["reason"]: v for labels, v in s["aiops_gpu_clocks_event_samples_total"]}
    assert set(reasons) == set(nvml_bits.NAMES.values())  # every reason, 0 included: stable series
    assert (reasons["GpuIdle"], reasons["HwThermalSlowdown"], reasons["HwPowerBrakeSlowdown"]) == (1, 1, 1)
    assert reasons["SwPowerCap"] == 0
    assert _value(s, "aiops_gpu_power_limit_max_watts", **gpu) == 700.0  # the newest row's
    assert s["aiops_gpu_pcie_link_generation"] == []  # the newest row (NVML lost) has none


def test_job_steps_histogram_stragglers_and_collectives() -> None:
    cache = _cache()
    steps = [
        (10.0, 1, 0.8, 2, "node0/gpu2"),
        (11.2, 2, 1.2, 2, "node0/gpu2"),
        (14.2, 3, 3.0, 5, "node1/gpu1"),
    ]
    _feed(
        cache,
        "job_steps",
        [
            {
                "ts_s": ts,
                "job": "llm",
                "step": n,
                "step_time_s": t,
                "slowest_rank": r,
                "slowest_gpu": g,
                "ranks": 16,
            }
            for ts, n, t, r, g in steps
        ],
    )
    s = _scrape(cache)
    job = {"node": "node0", "job": "llm"}
    buckets = {labels["le"]: v for labels, v in s["aiops_job_step_duration_seconds_bucket"]}
    assert (buckets["0.5"], buckets["1.0"], buckets["2.0"], buckets["5.0"], buckets["+Inf"]) == (
        0,
        1,
        2,
        3,
        3,
    )
    assert _value(s, "aiops_job_step_duration_seconds_count", **job) == 3
    assert abs(_value(s, "aiops_job_step_duration_seconds_sum", **job) - 5.0) < 1e-9
    assert _value(s, "aiops_job_last_step_duration_seconds", **job) == 3.0
    assert _value(s, "aiops_job_last_step_timestamp_seconds", **job) == 14.2
    slowest = {(labels["rank"], labels["gpu"]): v for labels, v in s["aiops_job_slowest_rank_steps_total"]}
    assert slowest == {("2", "node0/gpu2"): 2, ("5", "node1/gpu1"): 1}

    def interval(ts_s: float, count: int, p99_ms: float, timeouts: int) -> dict[str, Any]:
        return {
            "ts_s": ts_s,
            "job": "llm",
            "op": "all_reduce",
            "scope": "inter_node",
            "interval_s": 1.0,
            "count": count,
            "bytes": count * 1000,
            "latency_p50_ms": 2.0,
            "latency_p99_ms": p99_ms,
            "timeouts": timeouts,
        }

    _feed(cache, "collective_samples", [interval(1.0, 10, 5.0, 0), interval(2.0, 7, 40.0, 1)])
    s = _scrape(cache)
    op = {**job, "op": "all_reduce", "scope": "inter_node"}
    assert _value(s, "aiops_collective_operations_total", **op) == 17
    assert _value(s, "aiops_collective_bytes_total", **op) == 17_000
    assert _value(s, "aiops_collective_timeouts_total", **op) == 1
    assert _value(s, "aiops_collective_latency_p99_seconds", **op) == 0.04  # the newest interval, in seconds
    assert _value(s, "aiops_collective_latency_p50_seconds", **op) == 0.002


def test_flow_classes_lane_rules_queue_delay_links_ib_bytes_and_loader_wait() -> None:
    cache = _cache()
    flow = {
        "nic": "node0/nic1",
        "node": "node0",
        "traffic_class": "collective",
        "lane": "bulk",
        "interval_s": 1.0,
    }
    _feed(
        cache,
        "flow_class_samples",
        [
            dict(flow, ts_s=1.0, rule_id="storage-prefix", tx_bytes=100),
            dict(flow, ts_s=2.0, rule_id="storage-prefix", tx_bytes=50),
            dict(flow, ts_s=2.0, rule_id=None, lane="fifo", tx_bytes=7),
        ],
    )
    rule = {"match_kind": "dscp", "match_value": "46", "lane": "vip", "scope": "fleet"}
    _feed(cache, "lane_rules", [dict(rule, ts_s=1.0, rule_id="a"), dict(rule, ts_s=1.0, rule_id="b")])
    _feed(cache, "lane_rules", [dict(rule, ts_s=5.0, rule_id="b", lane="bulk")])  # a new snapshot replaces
    nic = {"nic": "node0/nic1", "node": "node0", "interval_s": 1.0}
    _feed(
        cache,
        "nic_samples",
        [
            dict(nic, ts_s=1.0, lane="vip", queue_delay_ms=2.5, link_up=True),
            dict(nic, ts_s=2.0, lane="vip", queue_delay_ms=30.0, link_up=False),
        ],
    )
    port = {"node": "node0", "device": "mlx5_1", "port": 1, "nic": "node0/nic1"}
    _feed(cache, "ib_port_samples", [dict(port, ts_s=1.0, port_rcv_data=1000, port_xmit_data=250)])
    _feed(
        cache, "host_samples", [{"ts_s": 1.0, "node": "node0", "cpu_util_pct": 50.0, "loader_wait_ms": 120.0}]
    )
    s = _scrape(cache)
    flows = {
        (labels["lane"], labels["rule_id"]): v for labels, v in s["aiops_flow_class_transmit_bytes_total"]
    }
    assert flows == {("bulk", "storage-prefix"): 150, ("fifo", ""): 7}
    assert {labels["traffic_class"] for labels, _ in s["aiops_flow_class_transmit_bytes_total"]} == {
        "collective"
    }
    rules = [
        (labels["rule_id"], labels["lane"], labels["match_value"]) for labels, _ in s["aiops_lane_rule_info"]
    ]
    assert rules == [("b", "bulk", "46")]
    assert _value(s, "aiops_lane_rules_timestamp_seconds", node="node0") == 5.0
    assert _value(s, "aiops_nic_queue_delay_seconds", node="node0", nic="node0/nic1", lane="vip") == 0.03
    assert _value(s, "aiops_nic_link_up", node="node0", nic="node0/nic1") == 0.0
    assert _value(s, "aiops_ib_port_receive_bytes_total", nic="node0/nic1", device="mlx5_1", port="1") == 4000
    assert _value(s, "aiops_ib_port_transmit_bytes_total", nic="node0/nic1") == 1000
    assert _value(s, "aiops_host_loader_wait_seconds", node="node0") == 0.12


def test_kernel_events_collector_health_and_incidents_carry_no_free_text() -> None:
    cache = _cache()
    hostile = 'NVRM: Xid 79 "} evil{x="1'
    event = {"node": "node0", "level": 3, "message": hostile, "pci_bus_id": "0000:3b:00.0"}
    _feed(
        cache,
        "kernel_events",
        [
            dict(event, ts_s=1.0, seq=1, kind="xid", component="node0/gpu3", code=79),
            dict(event, ts_s=2.0, seq=2, kind="xid", component="node0/gpu3", code=79),
            dict(event, ts_s=3.0, seq=3, kind="link", component="node0/nic1", device="mlx5_1", code=0),
            dict(event, ts_s=4.0, seq=4, kind="other", component=None, code=None),
        ],
    )
    _feed(
        cache,
        "collector_errors",
        [
            {
                "ts_s": 1.0,
                "collector": "infiniband",
                "component": "node0",
                "error": "unavailable",
                "detail": hostile,
            },
            {
                "ts_s": 2.0,
                "collector": "nvml",
                "component": None,
                "error": "NVMLError Timeout!",
                "detail": hostile,
            },
        ],
    )
    cache.set_incidents(
        [
            {
                "incident_id": "inc-1",
                "severity": "critical",
                "root_cause": "thermal_throttle",
                "component": "node0/gpu3",
                "opened_ts_s": 100.0,
                "confidence": 0.82,
            },
            {
                "incident_id": "inc-2",
                "severity": "warning",
                "root_cause": None,
                "component": None,
                "opened_ts_s": 7.0,
            },
        ]
    )
    s = _scrape(cache)
    kernel = {
        (labels["kind"], labels["component"], labels["device"], labels["code"]): v
        for labels, v in s["aiops_kernel_device_events_total"]
    }
    assert kernel == {
        ("xid", "node0/gpu3", "", "79"): 2,
        ("link", "node0/nic1", "mlx5_1", "0"): 1,
        ("other", "node0", "", ""): 1,  # a line naming no device counts against the node
    }
    errors = {
        (labels["collector"], labels["error"]): v for labels, v in s["aiops_collector_error_rows_total"]
    }
    assert errors == {("infiniband", "unavailable"): 1, ("nvml", "NVMLError_Timeout_"): 1}
    unavailable = [labels for labels, _ in s["aiops_collector_unavailable"]]
    assert unavailable == [{"node": "node0", "collector": "infiniband", "component": "node0"}]
    first = {
        "node": "node0",
        "incident_id": "inc-1",
        "severity": "critical",
        "root_cause": "thermal_throttle",
    }
    assert _value(s, "aiops_incident_opened_timestamp_seconds", **first) == 100.0
    assert _value(s, "aiops_incident_confidence_ratio", **first) == 0.82
    assert _value(s, "aiops_incident_opened_timestamp_seconds", incident_id="inc-2", root_cause="") == 7.0
    assert len(s["aiops_incident_confidence_ratio"]) == 1  # inc-2 has no hypothesis
    every_label = {v for samples in s.values() for labels, _ in samples for v in labels.values()}
    assert not any("NVRM" in v or "evil" in v for v in every_label)


def test_netdev_and_ib_of_two_nodes_with_the_same_device_names_are_two_series() -> None:
    """The twin's service collects every node, whose RoCE netdevs share names: each keeps its own series."""
    cache = _cache()
    dev = {"ts_s": 1.0, "dev": "ens1f0np0", "oper_up": True}
    _feed(
        cache,
        "netdev_samples",
        [
            dict(dev, node="node0", nic="node0/nic0", rx_bytes=10),
            dict(dev, node="node1", nic="node1/nic0", rx_bytes=20),
        ],
    )
    port = {"ts_s": 1.0, "device": "mlx5_0", "port": 1, "link_downed": 0}
    _feed(
        cache,
        "ib_port_samples",
        [
            dict(port, node="node0", nic="node0/nic0"),
            dict(port, node="node1", nic="node1/nic0", link_downed=3),
        ],
    )
    s = _scrape(cache)
    assert (
        _value(s, "aiops_netdev_receive_bytes_total", node="node0", dev="ens1f0np0", nic="node0/nic0") == 10
    )
    assert (
        _value(s, "aiops_netdev_receive_bytes_total", node="node1", dev="ens1f0np0", nic="node1/nic0") == 20
    )
    assert _value(s, "aiops_ib_link_downed_total", node="node1", device="mlx5_0", port="1") == 3
    assert len(s["aiops_netdev_up"]) == 2


# -- the real scrape ---------------------------------------------------------------------------------------------
def _documented() -> dict[str, tuple[str, set[str], str, str]]:
    """docs/METRICS.md's table: family -> (type, labels, per GPU, per node)."""
    out = {}
    for line in DOC.read_text().splitlines():
        if not line.startswith("| `aiops_"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 7, line
        names, kind, labels, _unit, _feeds, per_gpu, per_node = cells
        label_set = set() if labels == "—" else {x.strip() for x in labels.split(",")}
        for name in re.findall(r"`(aiops_\w+)`", names):
            out[name] = (kind, label_set, per_gpu, per_node.removesuffix(" each"))
    return out


def _series(text: str) -> tuple[dict[str, str], dict[str, list[dict[str, str]]]]:
    """family (as documented: counters with `_total`) -> type, and -> the labels of each of its series."""
    types: dict[str, str] = {}
    series: dict[str, list[dict[str, str]]] = defaultdict(list)
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        types[name] = family.type
        for sample in family.samples:
            series[name].append({k: v for k, v in sample.labels.items() if k != "le"})
    return types, series


def _within(count: int, stated: str) -> bool:
    if stated == "events":
        return True
    if "–" in stated:
        low, high = (int(x) for x in stated.split("–"))
        return low <= count <= high
    return count == int(stated)


def test_a_real_node_agent_scrape_passes_promtool_and_matches_the_documented_cardinality(
    tmp_path: Path,
) -> None:
    promtool = require_binary("promtool")
    scenario = tmp_path / "node.yaml"
    scenario.write_text(NODE_SCENARIO)
    with running_service(tmp_path, tmp_path / "node.duckdb", "--sim", str(scenario), "--speed", "10") as (
        _,
        port,
    ):

        def scraped() -> str | None:
            status, body = get(f"http://127.0.0.1:{port}/metrics")
            text = body.decode()
            wanted = (
                "aiops_job_slowest_rank_steps_total{",
                "aiops_collective_latency_p99_seconds{",
                "aiops_lane_rule_info{",
            )
            return text if status == 200 and all(w in text for w in wanted) else None

        text = str(wait_for(scraped, 60, "the job, collective and lane families"))
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=text.encode(), capture_output=True, timeout=60
    )
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), checked

    doc = _documented()
    types, series = _series(text)
    assert set(types) <= set(doc), (
        f"families /metrics serves that docs/METRICS.md does not list: {set(types) - set(doc)}"
    )
    for name, kind in types.items():
        doc_kind, doc_labels, _, per_node = doc[name]
        assert kind == doc_kind, (name, kind, doc_kind)
        for labels in series[name]:
            assert set(labels) == doc_labels, (name, labels, doc_labels)
        assert _within(len(series[name]), per_node), (name, len(series[name]), per_node)
    for name, (_, _, _, per_node) in doc.items():  # a family the twin does not serve is documented with 0
        if name not in types:
            assert per_node in ("0", "events"), (name, per_node)

    ranks = {(s["job"], s["rank"], s["gpu"]) for s in series["aiops_job_rank_info"]}
    assert ranks == {("llm", str(g), f"node0/gpu{g}") for g in range(8)}
    assert {s["job"] for s in series["aiops_job_step_duration_seconds"]} == {"llm"}
    assert all(s["rank"] and s["job"] == "llm" for s in series["aiops_job_slowest_rank_steps_total"])
    assert {s["node"] for s in series["aiops_node_info"]} == {"node0"}

    per_gpu: Counter[str] = Counter()
    for name, found in series.items():
        if doc[name][2].isdigit():
            per_gpu.update(labels["gpu"] for labels in found)
    documented_per_gpu = sum(int(g) for _, _, g, _ in doc.values() if g.isdigit())
    stated = re.search(r"\*\*(\d+) series per GPU\*\*", DOC.read_text())
    assert stated and int(stated.group(1)) == documented_per_gpu
    assert per_gpu == {f"node0/gpu{g}": documented_per_gpu for g in range(8)}, per_gpu
    fixed = sum(int(n) for _, _, _, n in doc.values() if n.isdigit())
    node_stated = re.search(r"\*\*(\d+) fixed series per node\*\*", DOC.read_text())
    assert node_stated and int(node_stated.group(1)) == fixed
    assert sum(len(series[name]) for name, (_, _, _, n) in doc.items() if n.isdigit()) == fixed
