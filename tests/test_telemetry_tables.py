"""Each declared telemetry table (aiops/columns.py) through what derives from its declarations: the node's export
from the rows it collected (`stored * scale`, counted columns as running totals, hand-written families under their
declared names, types, labels and HELP), the fleet's families and its pivot back into the table, and the leak
test's allowance; rack_samples, which no node exports, through the facility series its sensors declare (the host
collectors' sensor tables: tests/test_telemetry_sensor_tables.py). The store, docs and probe-column checks over
every table are in tests/test_telemetry_columns.py."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from aiops import columns
from aiops.columns import (
    COLLECTIVE_SAMPLES,
    HOST_SAMPLES,
    IB_PORT_SAMPLES,
    JOB_STEPS,
    NETDEV_SAMPLES,
    NIC_SAMPLES,
    RACK_SAMPLES,
    RANK_TIMING_SAMPLES,
)
from aiops.config import FacilityConfig, FacilitySeries
from aiops.fleet import families
from aiops.fleet.pivot import JOB_STEPS as JOB_STEPS_SQL
from aiops.fleet.pivot import (
    RANK_TIMING,
    collective_samples_sql,
    flow_class_samples_sql,
    host_samples_sql,
    ib_sql,
    netdev_sql,
    nic_samples_sql,
)
from aiops.profile.rank_timing import RANK_COLUMNS
from aiops.service.metrics import MetricsCache
from aiops.sources.facility import render_facility_snapshot
from tests.twin.twin_observed import OBSERVED

ROOT = Path(__file__).resolve().parents[1]


def _scrape(cache: MetricsCache) -> str:
    """The node's /metrics text for what the cache observed."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(cache)
    return generate_latest(registry).decode()


def test_host_samples_round_trip_through_their_declarations() -> None:
    """host_samples, the second table on the declarations: the node exports each declared family as
    `stored * scale` from the row it collected, the fleet reads exactly those families back into the columns
    (the inverse scale), and the leak test's allowance is the declaration's."""
    cache = MetricsCache("node0")
    row = {"ts_s": 1.0, "node": "node0", "cpu_util_pct": 40.0, "iowait_pct": 2.0, "loader_wait_ms": 250.0}
    cache.observe("host_samples", tuple(row), [tuple(row.values())])
    text = _scrape(cache)
    assert 'aiops_host_loader_wait_seconds{node="node0"} 0.25' in text
    assert 'aiops_host_cpu_utilisation_ratio{node="node0"} 0.4' in text
    assert text.count("# TYPE aiops_host_loader_wait_seconds gauge") == 1  # one exporter of the family
    assert tuple(f.name for f in columns.families(HOST_SAMPLES)) == families.HOST
    sql = host_samples_sql()
    read = columns.fleet_read(HOST_SAMPLES)
    assert f"INSERT INTO host_samples (ts_s, node, {', '.join(c.name for c in read)})" in sql
    assert all(c.family is not None and f"name = '{c.family.name}'" in sql for c in read)
    assert "max(value * 1000.0) FILTER (WHERE name = 'aiops_host_loader_wait_seconds')" in sql
    assert OBSERVED[("host_samples", "loader_wait_ms")][0] == frozenset({"input_pipeline_bottleneck"})


def test_nic_samples_counters_export_running_totals_and_read_back_increases() -> None:
    """nic_samples, the third table: a counted column (what its interval added) is exported as the running total
    of its lane (a counter), the fleet reads it back as the increase between scrapes (`d`), a gauge as the newest
    value over its scale; the families the fleet reads are the declared ones and the hand-written link state."""
    cache = MetricsCache("node0")
    cols = ("ts_s", "nic", "node", "lane", "tx_bytes", "drops", "queue_delay_ms")
    cache.observe("nic_samples", cols, [(1.0, "node0/nic0", "node0", "bulk", 100, 2, 4.0)])
    cache.observe("nic_samples", cols, [(2.0, "node0/nic0", "node0", "bulk", 50, None, 6.0)])
    text = _scrape(cache)
    assert 'aiops_nic_transmit_bytes_total{lane="bulk",nic="node0/nic0"} 150.0' in text
    assert 'aiops_nic_drops_total{lane="bulk",nic="node0/nic0"} 2.0' in text
    assert 'aiops_nic_queue_delay_seconds{lane="bulk",nic="node0/nic0",node="node0"} 0.006' in text
    assert text.count("# TYPE aiops_nic_queue_delay_seconds gauge") == 1  # one exporter of the family
    assert (
        'node_network_transmit_bytes_total{device="eth0",instance="node0:9100",job="node"} 150'
        in cache.dcgm_text()
    )
    assert families.NIC[:-1] == tuple(f.name for f in columns.families(NIC_SAMPLES))
    sql = nic_samples_sql()
    assert "CAST(max(d) FILTER (WHERE name = 'aiops_nic_transmit_bytes_total') AS BIGINT) AS tx_bytes" in sql
    assert (
        "max(value * 1000.0) FILTER (WHERE name = 'aiops_nic_queue_delay_seconds') AS queue_delay_ms" in sql
    )
    assert OBSERVED[("nic_samples", "drops")][0] == frozenset({"nic_link_flap", "ecn_misconfig"})
    # flow_class_samples, the same shape: bytes per class summed per (node, nic, class, lane, rule), none = ''
    flows = ("ts_s", "nic", "node", "traffic_class", "rule_id", "lane", "tx_bytes")
    cache.observe("flow_class_samples", flows, [(1.0, "node0/nic0", "node0", "bulk", None, "vip", 70)])
    cache.observe("flow_class_samples", flows, [(2.0, "node0/nic0", "node0", "bulk", None, "vip", 30)])
    assert (
        'aiops_flow_class_transmit_bytes_total{lane="vip",nic="node0/nic0",node="node0",rule_id="",'
        'traffic_class="bulk"} 100.0' in _scrape(cache)
    )
    assert "CAST(max(d) FILTER (WHERE name = 'aiops_flow_class_transmit_bytes_total') AS BIGINT)" in (
        flow_class_samples_sql()
    )


def test_netdev_samples_counters_are_the_kernels_totals_exported_and_read_back_as_they_are() -> None:
    """netdev_samples, the fourth table: the kernel's cumulative statistics are exported as stored (a NIC-less
    device with an empty `nic` label) and the fleet reads the newest total back, not an increase."""
    cache = MetricsCache("node0")
    cols = ("ts_s", "node", "dev", "nic", "rx_bytes", "rx_pause_frames", "oper_up")
    cache.observe("netdev_samples", cols, [(1.0, "node0", "eth0", None, 1000, 7, True)])
    text = _scrape(cache)
    assert 'aiops_netdev_receive_bytes_total{dev="eth0",nic="",node="node0"} 1000.0' in text
    assert 'aiops_netdev_receive_pause_frames_total{dev="eth0",nic="",node="node0"} 7.0' in text
    assert 'aiops_netdev_up{dev="eth0",nic="",node="node0"} 1.0' in text
    assert tuple(f.name for f in columns.families(NETDEV_SAMPLES)) == families.NETDEV
    assert (
        "CAST(max(value) FILTER (WHERE name = 'aiops_netdev_receive_bytes_total') AS BIGINT)" in netdev_sql()
    )


def test_ib_port_samples_export_the_ports_totals_and_their_data_words_in_bytes() -> None:
    """ib_port_samples, the sixth table: the ports' cumulative counters are exported as read, the data words
    (4-octet IBA PortRcvData/PortXmitData) in bytes, and the fleet reads the newest totals back, the bytes over 4;
    every family exported once, under its declared labels."""
    cache = MetricsCache("node0")
    cols = ("ts_s", "node", "device", "port", "nic", "link_downed", "port_rcv_data", "np_cnp_sent")
    cache.observe("ib_port_samples", cols, [(1.0, "node0", "mlx5_0", 1, "node0/nic0", 3, 1000, 7)])
    text = _scrape(cache)
    assert 'aiops_ib_link_downed_total{device="mlx5_0",nic="node0/nic0",node="node0",port="1"} 3.0' in text
    assert (
        'aiops_ib_port_receive_bytes_total{device="mlx5_0",nic="node0/nic0",node="node0",port="1"} 4000.0'
        in (text)
    )
    assert 'aiops_ib_np_cnp_sent_total{device="mlx5_0",nic="node0/nic0",node="node0",port="1"} 7.0' in text
    assert text.count("# TYPE aiops_ib_port_receive_bytes_total counter") == 1  # one exporter of the family
    assert tuple(f.name for f in columns.families(IB_PORT_SAMPLES)) == families.IB
    sql = ib_sql()
    assert "CAST(max(value / 4.0) FILTER (WHERE name = 'aiops_ib_port_receive_bytes_total') AS BIGINT)" in sql
    assert "CAST(max(value) FILTER (WHERE name = 'aiops_ib_link_downed_total') AS BIGINT)" in sql
    assert "local_ack_timeout_err" in sql and "rate_gbps" not in sql  # a column without a family is not read
    assert OBSERVED[("ib_port_samples", "out_of_sequence")][0] == frozenset({"ecn_misconfig"})
    assert OBSERVED[("ib_port_samples", "port_xmit_wait")][0] == columns.ANY


def test_collective_samples_count_per_job_op_and_scope_under_the_agents_node() -> None:
    """collective_samples, the seventh table: its counts are counted (summed per job, op and scope, read back as
    increases), its latency quantiles the newest over their scale; a job's rows name no node, so its series carry
    the node the agent runs as; a count the source does not measure (the probes' timeouts) is no series."""
    cache = MetricsCache("home0")
    cols = ("ts_s", "job", "op", "scope", "interval_s", "count", "bytes", "latency_p99_ms", "timeouts")
    cache.observe(
        "collective_samples", cols, [(1.0, "llm", "all_reduce", "inter_node", 1.0, 10, 640, 4.0, 0)]
    )
    cache.observe("collective_samples", cols, [(2.0, "llm", "all_reduce", "inter_node", 1.0, 5, 320, 9.0, 1)])
    cache.observe(
        "collective_samples", cols, [(2.0, "llm", "all_reduce", "node_ranks", 1.0, 7, 0, None, None)]
    )
    text = _scrape(cache)
    key = 'job="llm",node="home0",op="all_reduce",scope="inter_node"'
    assert f"aiops_collective_operations_total{{{key}}} 15.0" in text
    assert f"aiops_collective_timeouts_total{{{key}}} 1.0" in text
    assert f"aiops_collective_latency_p99_seconds{{{key}}} 0.009" in text
    assert (
        'aiops_collective_operations_total{job="llm",node="home0",op="all_reduce",scope="node_ranks"} 7.0'
        in text
    )
    assert 'scope="node_ranks"} 0.0' in text  # its bytes
    assert not re.search(r"aiops_collective_timeouts_total\{[^}]*node_ranks", text)
    assert text.count("# TYPE aiops_collective_operations_total counter") == 1  # one exporter of the family
    assert {f.name for f in columns.families(COLLECTIVE_SAMPLES)} <= set(families.JOB)
    sql = collective_samples_sql()
    assert "CAST(max(d) FILTER (WHERE name = 'aiops_collective_operations_total') AS BIGINT) AS count" in sql
    assert "max(value * 1000.0) FILTER (WHERE name = 'aiops_collective_latency_p50_seconds')" in sql
    assert OBSERVED[("collective_samples", "latency_p99_ms")][0] == columns.ANY
    assert ("collective_samples", "timeouts") not in OBSERVED


def test_rank_timing_families_are_declared_with_the_table_and_rendered_from_its_sums() -> None:
    """rank_timing_samples, the eighth table: its families are hand-written (a rank's calls and blocked time summed
    per kind over its ops, its probed seconds once per window), declared with the table: the node's export, the
    fleet's families and pivot take their names, labels and HELP from the declaration; the probes' rows are the
    declared columns."""
    cache = MetricsCache("node0")
    cols = ("ts_s", "node", "job", "rank", "pid", "op", "kind", "window_s", "calls", "blocked_s")
    rows = [
        (1.0, "node0", "llm", 3, 77, "all_reduce", "collective", 0.5, 4, 0.25),
        (
            1.0,
            "node0",
            "llm",
            3,
            77,
            "all_gather",
            "collective",
            0.5,
            2,
            0.125,
        ),  # the same window, another op
    ]
    cache.observe("rank_timing_samples", cols, rows)
    text = _scrape(cache)
    rank = 'job="llm",kind="collective",node="node0",rank="3"'
    assert f"aiops_rank_blocked_seconds_total{{{rank}}} 0.375" in text
    assert f"aiops_rank_calls_total{{{rank}}} 6.0" in text
    assert 'aiops_rank_probed_seconds_total{job="llm",node="node0",rank="3"} 0.5' in text  # the window once
    for family in RANK_TIMING_SAMPLES.hand_written:
        assert f"# HELP {family.name} {family.help}" in text
    assert tuple(f.name for f in columns.families(RANK_TIMING_SAMPLES)) == families.RANKS
    assert all(f"name = '{name}'" in RANK_TIMING for name in families.RANKS)
    assert "kind IN ('collective', 'group', 'sync', 'copy')" in RANK_TIMING
    assert tuple(c.name for c in RANK_TIMING_SAMPLES.columns) == RANK_COLUMNS
    assert OBSERVED[("rank_timing_samples", "blocked_s")][0] == columns.ANY


def test_job_steps_families_are_declared_with_the_table_a_histogram_among_them() -> None:
    """job_steps, the ninth table: its families are hand-written (a histogram of step times, the newest step, the
    slowest ranks' steps), declared with the table: the node's export takes names, types, labels and HELP from the
    declaration, docs/METRICS.md's rows say histogram, and the fleet reads the histogram's count and sum."""
    cache = MetricsCache("home0")
    cols = ("ts_s", "job", "step", "step_time_s", "slowest_rank", "slowest_gpu", "ranks")
    cache.observe(
        "job_steps",
        cols,
        [(5.0, "llm", 1, 1.5, 3, "node1/gpu3", 8), (6.0, "llm", 2, 0.5, 3, "node1/gpu3", 8)],
    )
    text = _scrape(cache)
    assert 'aiops_job_step_duration_seconds_count{job="llm",node="home0"} 2.0' in text
    assert 'aiops_job_step_duration_seconds_bucket{job="llm",le="1.0",node="home0"} 1.0' in text
    assert 'aiops_job_last_step_timestamp_seconds{job="llm",node="home0"} 6.0' in text
    assert 'aiops_job_slowest_rank_steps_total{gpu="node1/gpu3",job="llm",node="home0",rank="3"} 2.0' in text
    for family in JOB_STEPS.hand_written:
        assert f"# TYPE {family.name} {family.kind}" in text
        assert f"# HELP {family.name} {family.help}" in text
    assert columns.markdown_rows(JOB_STEPS)[0].startswith(
        "| `aiops_job_step_duration_seconds` | histogram | node, job |"
    )
    assert families.JOB[:4] == (
        "aiops_job_step_duration_seconds_count",
        "aiops_job_step_duration_seconds_sum",
        "aiops_job_last_step_timestamp_seconds",
        "aiops_job_slowest_rank_steps_total",
    )
    assert all(f"name = '{name}'" in JOB_STEPS_SQL for name in families.JOB[:4])
    assert OBSERVED[("job_steps", "step_time_s")][0] == columns.ANY


def test_rack_samples_sensors_declare_the_facility_series_they_are_read_from() -> None:
    """rack_samples, the tenth table: no node agent exports it; each sensor column declares the facility exporter
    series `[facility]` reads it from by default (how a rack's series combine, the scale, the exporter's HELP):
    the config's defaults, the twin's /metrics/facility and docs/FACILITY.md's table follow from that."""
    declared = columns.facility_columns(RACK_SAMPLES)
    fields = [n for n, f in FacilityConfig.model_fields.items() if f.annotation is FacilitySeries]
    assert fields == [c.name for c in declared]
    config, doc = FacilityConfig(), (ROOT / "docs" / "FACILITY.md").read_text()
    row = {"ts_s": 1.0, "rack": "rack0", **{c.name: 2.0 for c in declared}}
    text = render_facility_snapshot([row])
    for c in declared:
        assert c.facility is not None
        series = getattr(config, c.name)
        assert (series.metric, series.aggregate, series.scale, tuple(series.match.items())) == (
            c.facility.metric,
            c.facility.aggregate,
            c.facility.scale,
            c.facility.match,
        )
        assert f"# HELP {c.facility.metric} {c.facility.help_text}" in text
        match = ",".join(f'{k}="{v}"' for k, v in c.facility.match)
        named = c.facility.metric + (f"{{{match}}}" if match else "")
        scale = "" if c.facility.scale == 1.0 else f" × {c.facility.scale:g}"
        assert f"| `{c.name}` | `{named}`{scale} | {c.facility.aggregate} |" in doc, c.name
    assert "power_cap_kw" not in [c.name for c in declared]  # the DCIM's word, not a sensor's
    assert OBSERVED[("rack_samples", "coolant_flow_lpm")][0] == frozenset({"rack_cooling_failure"})
