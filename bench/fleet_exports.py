"""Synthetic node-agent exports for bench/fleet.py: what N GPUs' `aiops run` agents serve at `/metrics`
(docs/METRICS.md, every family aiops/fleet/families.py reads), scrape by scrape, as Prometheus text with
millisecond timestamps for VictoriaMetrics' `/api/v1/import/prometheus`.

Written straight as text (the twin cannot run 10,240 GPUs): 8 GPUs and 2 NICs (3 lanes each) per node, host
names `gpu-h100-0001`..., racks of 16 nodes, one training job over every GPU (rank info on every node; the step
histogram, the straggler counter and the collectives on the rank-0 node), 3 lane rules per node. Every series
carries `instance` and, where the export has none, the scrape job's `job`, as Prometheus or vmagent adds them.
Values are those of a healthy H100 cluster at full load; ONE GPU goes hot and throttled (HwThermalSlowdown and
SwThermalSlowdown set in every sample, die at 92 C, SM clock down) from the scrape at `fault_ts_s` on.

Most series keep their value from one scrape to the next (info, limits, error counters at 0): their lines are
built once and joined per scrape with the timestamp as separator; the varying ones (temperatures, power, clocks,
sample and byte counters) are formatted from numpy arrays.

With `shards` > 1 (bench/fleet.py --shards) the nodes split into that many shards of whole racks, in order, and
every series carries `shard="K"`, the target label a scrape config gives a rack set's agents: one `aiops fleet`
per shard reads its own with `[fleet] selector = 'shard="K"'`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from aiops.columns import IB_PORT_SAMPLES, exported
from bench.fleet_cap import add_site_cap

GPUS_PER_NODE = 8
NICS_PER_NODE = 2
NODES_PER_RACK = 16
LANES = ("vip", "standard", "bulk")
FLOWS = (("collective", "vip", "r-nccl"), ("bulk", "bulk", "r-ckpt"), ("other", "standard", ""))
RULES = (
    ("r-nccl", "dscp", "46", "vip"),
    ("r-ckpt", "cgroup", "/sys/fs/cgroup/ckpt", "bulk"),
    ("r-default", "default", "", "standard"),
)
REASONS = (
    "GpuIdle",
    "ApplicationsClocksSetting",
    "SwPowerCap",
    "HwSlowdown",
    "SyncBoost",
    "SwThermalSlowdown",
    "HwThermalSlowdown",
    "HwPowerBrakeSlowdown",
)
FAULT_REASONS = ("SwThermalSlowdown", "HwThermalSlowdown")
# the ports' counters as the exporter declares them (aiops/columns_ib.py), but their data words (bytes, below)
IB_COUNTERS = tuple(c.family.name for c in exported(IB_PORT_SAMPLES) if c.family and c.scale == 1.0)
NETDEV_ZERO = (
    "receive_errors",
    "transmit_errors",
    "receive_drops",
    "transmit_drops",
    "carrier_changes",
    "receive_pause_frames",
    "transmit_pause_frames",
)
STEP_BUCKETS_S = ("0.05", "0.1", "0.25", "0.5", "1.0", "2.0", "5.0", "10.0", "30.0", "60.0", "120.0", "+Inf")
SAMPLES_PER_S = 1  # the node agent samples NVML at 1 Hz
STEP_TIME_S = 1.25  # the job's training step
JOB = "llm-pretrain-7"
SCRAPE_JOB = "aiops-node"
NIC_BPS = 20e9  # bytes per second a NIC sends at full load (~160 Gbit/s of a 200 Gbit/s link)
LANE_SHARE = (0.7, 0.2, 0.1)  # of a NIC's bytes: vip (collectives), standard, bulk (checkpoints)


def host(i: int) -> str:
    return f"gpu-h100-{i + 1:04d}"


def rack(i: int) -> str:
    return f"rack-{i // NODES_PER_RACK + 1:03d}"


def labels(**pairs: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


@dataclass
class Varying:
    """Series whose value changes every scrape: each line's `name{labels} ` and the values at scrape k."""

    prefixes: list[str]
    values: Callable[[int], np.ndarray]  # one value per prefix, at scrape k
    integer: bool = True


@dataclass
class Exports:
    gpus: int
    step_s: float
    start_s: float  # scrape 0
    fault_ts_s: float  # the first scrape that shows the fault
    fault_gpu: str
    constant: list[str] = field(default_factory=list)  # "name{labels} value": the same at every scrape
    varying: list[Varying] = field(default_factory=list)
    fault: list[tuple[str, Callable[[int], str]]] = field(default_factory=list)  # the fault GPU's own lines

    @property
    def nodes(self) -> int:
        return self.gpus // GPUS_PER_NODE

    @property
    def series(self) -> int:
        return len(self.constant) + sum(len(v.prefixes) for v in self.varying) + len(self.fault)

    def fault_scrape(self) -> int:
        return round((self.fault_ts_s - self.start_s) / self.step_s)

    def scrape(self, k: int) -> str:
        """Every series' sample of scrape k (at start_s + k * step_s), one line each."""
        sep = f" {round((self.start_s + k * self.step_s) * 1000)}\n"
        parts = [sep.join(self.constant), sep]
        for group in self.varying:
            values = group.values(k)
            text = values.astype(np.int64).astype(str) if group.integer else np.round(values, 3).astype(str)
            parts.append(sep.join([p + v for p, v in zip(group.prefixes, text.tolist(), strict=True)]))
            parts.append(sep)
        parts.append(sep.join(p + value(k) for p, value in self.fault))
        parts.append(sep)
        return "".join(parts)


def build(
    gpus: int,
    step_s: float,
    start_s: float,
    fault_ts_s: float,
    seed: int = 7,
    shards: int = 1,
    cap_ts_s: float | None = None,
) -> Exports:
    """The exports of `gpus` GPUs; with `shards` > 1 every series also carries `shard="K"` (module doc); with
    `cap_ts_s` the facility's rack series and a site-wide DCIM cap from then on (bench/fleet_cap.py)."""
    if gpus <= 0 or gpus % GPUS_PER_NODE:
        raise ValueError(f"--gpus must be a positive multiple of {GPUS_PER_NODE}, got {gpus}")
    nodes = gpus // GPUS_PER_NODE
    if shards > 1 and nodes % (shards * NODES_PER_RACK):
        raise ValueError(
            f"{nodes} nodes do not split into {shards} shards of whole racks of {NODES_PER_RACK}"
        )
    fault_node = min(nodes - 1, nodes // 2 + 3)
    out = Exports(gpus, step_s, start_s, fault_ts_s, f"{host(fault_node)}/gpu3")
    _inventory(out)
    _gpus(out, np.random.default_rng(seed))
    _network(out)
    _hosts_and_job(out)
    if cap_ts_s is not None:
        per_shard = nodes // shards
        racks = [
            (rack(first), f',shard="{shard_of(first, per_shard)}"' if shards > 1 else "")
            for first in range(0, nodes, NODES_PER_RACK)
        ]
        add_site_cap(out, cap_ts_s, racks, NODES_PER_RACK * GPUS_PER_NODE, NODES_PER_RACK)
    if shards > 1:
        _label_shards(out, nodes // shards)
    return out


def shard_of(node: int, nodes_per_shard: int) -> int:
    return node // nodes_per_shard


def _label_shards(out: Exports, nodes_per_shard: int) -> None:
    """`shard="K"` after every series' `instance` label, as a scrape config adds a target label (a rack set's
    agents in one scrape job or relabelled from the node's rack): K = the node's index // `nodes_per_shard`."""
    pattern = re.compile(r'instance="gpu-h100-(\d+):9484"')

    def labelled(line: str) -> str:
        return pattern.sub(
            lambda m: f'{m.group(0)},shard="{shard_of(int(m.group(1)) - 1, nodes_per_shard)}"', line
        )

    out.constant = [labelled(line) for line in out.constant]
    for group in out.varying:
        group.prefixes = [labelled(prefix) for prefix in group.prefixes]
    out.fault = [(labelled(prefix), value) for prefix, value in out.fault]


def _inventory(out: Exports) -> None:
    c = out.constant
    for i in range(out.nodes):
        h, r, inst = host(i), rack(i), f"{host(i)}:9484"
        c.append(f"aiops_node_info{labels(node=h, rack=r, instance=inst, job=SCRAPE_JOB)} 1")
        for g in range(GPUS_PER_NODE):
            gpu, uuid = f"{h}/gpu{g}", f"GPU-{i:08x}-{g:04x}-4a3b-9c2d-{i * 8 + g:012x}"
            nic = f"{h}/nic{g * NICS_PER_NODE // GPUS_PER_NODE}"
            info = labels(node=h, rack=r, gpu=gpu, index=str(g), uuid=uuid, instance=inst, job=SCRAPE_JOB)
            c.append(f"aiops_gpu_info{info} 1")
            rank = labels(
                job=JOB, rank=str(i * 8 + g), node=h, rack=r, gpu=gpu, uuid=uuid, nic=nic, instance=inst
            )
            c.append(f"aiops_job_rank_info{rank} 1")
        for n in range(NICS_PER_NODE):
            nic = labels(
                node=h,
                rack=r,
                nic=f"{h}/nic{n}",
                index=str(n),
                device=f"mlx5_{n}",
                instance=inst,
                job=SCRAPE_JOB,
            )
            c.append(f"aiops_nic_info{nic} 1")
        for rule_id, kind, value, lane in RULES:
            rule = labels(
                node=h,
                rule_id=rule_id,
                match_kind=kind,
                match_value=value,
                lane=lane,
                scope="fleet",
                instance=inst,
                job=SCRAPE_JOB,
            )
            c.append(f"aiops_lane_rule_info{rule} 1")
        c.append(
            f"aiops_lane_rules_timestamp_seconds{labels(node=h, instance=inst, job=SCRAPE_JOB)} {out.start_s:.0f}"
        )


def _gpu_label_sets(out: Exports) -> list[tuple[str, str]]:
    """(gpu, `gpu="...",node="...",instance="...",job="..."`) of every GPU but the faulty one."""
    sets = []
    for i in range(out.nodes):
        h = host(i)
        for g in range(GPUS_PER_NODE):
            gpu = f"{h}/gpu{g}"
            sets.append((gpu, f'gpu="{gpu}",node="{h}",instance="{h}:9484",job="{SCRAPE_JOB}"'))
    return sets


def _gpus(out: Exports, rng: np.random.Generator) -> None:
    sets = _gpu_label_sets(out)
    healthy = [s for gpu, s in sets if gpu != out.fault_gpu]
    (fault,) = [s for gpu, s in sets if gpu == out.fault_gpu]
    fixed = {
        "aiops_gpu_power_limit_watts": "700",
        "aiops_gpu_power_limit_max_watts": "700",
        "aiops_gpu_power_limit_min_watts": "200",
        "aiops_gpu_power_limit_default_watts": "700",
        "aiops_gpu_sm_clock_max_hertz": "1980000000",
        "aiops_gpu_slowdown_temperature_celsius": "87",
        "aiops_gpu_pcie_link_width_lanes": "16",
        "aiops_gpu_pcie_link_width_max_lanes": "16",
        "aiops_gpu_pcie_link_generation": "5",
        'aiops_gpu_ecc_errors_total|type="corrected"': "0",
        'aiops_gpu_ecc_errors_total|type="uncorrected"': "0",
        "aiops_gpu_pcie_replays_total": "0",
        'aiops_gpu_nvlink_errors_total|type="crc"': "0",
        'aiops_gpu_nvlink_errors_total|type="replay"': "0",
        "aiops_gpu_nvml_error_samples_total": "0",
    }
    for key, value in fixed.items():
        name, _, extra = key.partition("|")
        more = f",{extra}" if extra else ""
        out.constant.extend(f"{name}{{{s}{more}}} {value}" for _, s in sets)
    for reason in REASONS:
        for name in ("aiops_gpu_clocks_event_reason", "aiops_gpu_clocks_event_samples_total"):
            out.constant.extend(f'{name}{{{s},reason="{reason}"}} 0' for s in healthy)
    out.constant.extend(f"aiops_gpu_throttled_samples_total{{{s}}} 0" for s in healthy)
    n = len(healthy)
    base_temp = rng.integers(55, 68, n)
    per_scrape = round(out.step_s * SAMPLES_PER_S)

    def noisy(base: np.ndarray, spread: float, seed: int) -> Callable[[int], np.ndarray]:
        return lambda k: (
            base + np.random.default_rng(seed * 100_003 + k).integers(-spread, spread + 1, len(base))
        )

    gauges: list[tuple[str, Callable[[int], np.ndarray], bool]] = [
        ("aiops_gpu_temperature_celsius", noisy(base_temp, 1, 1), True),
        ("aiops_gpu_memory_temperature_celsius", noisy(base_temp + 8, 1, 2), True),
        ("aiops_gpu_power_watts", lambda k: 640 + np.random.default_rng(3_000 + k).random(n) * 50, False),
        ("aiops_gpu_sm_clock_hertz", lambda k: np.full(n, 1_980_000_000), True),
        (
            "aiops_gpu_utilization_ratio",
            lambda k: 0.9 + np.random.default_rng(4_000 + k).random(n) / 10,
            False,
        ),
        ("aiops_gpu_samples_total", lambda k: np.full(n, per_scrape * (k + 10_000)), True),
    ]
    for name, values, integer in gauges:
        out.varying.append(Varying([f"{name}{{{s}}} " for s in healthy], values, integer))
    k_f = out.fault_scrape()
    hot = lambda k: k >= k_f  # noqa: E731
    since = lambda k: max(0, k - k_f + 1) * per_scrape  # noqa: E731
    lines: list[tuple[str, Callable[[int], str]]] = [
        (f"aiops_gpu_temperature_celsius{{{fault}}} ", lambda k: "92" if hot(k) else "64"),
        (f"aiops_gpu_memory_temperature_celsius{{{fault}}} ", lambda k: "95" if hot(k) else "72"),
        (f"aiops_gpu_power_watts{{{fault}}} ", lambda k: "521.4" if hot(k) else "655.2"),
        (f"aiops_gpu_sm_clock_hertz{{{fault}}} ", lambda k: "1410000000" if hot(k) else "1980000000"),
        (f"aiops_gpu_utilization_ratio{{{fault}}} ", lambda k: "1"),
        (f"aiops_gpu_samples_total{{{fault}}} ", lambda k: str(per_scrape * (k + 10_000))),
        (f"aiops_gpu_throttled_samples_total{{{fault}}} ", lambda k: str(since(k))),
    ]
    for reason in REASONS:
        faulty = reason in FAULT_REASONS
        lines.append(
            (
                f'aiops_gpu_clocks_event_reason{{{fault},reason="{reason}"}} ',
                lambda k, f=faulty: "1" if f and hot(k) else "0",
            )
        )
        lines.append(
            (
                f'aiops_gpu_clocks_event_samples_total{{{fault},reason="{reason}"}} ',
                lambda k, f=faulty: str(since(k)) if f else "0",
            )
        )
    out.fault = lines


def _network(out: Exports) -> None:
    c = out.constant
    lane_tx: list[str] = []
    flow_tx: list[str] = []
    port_bytes: list[str] = []
    share = {lane: s for lane, s in zip(LANES, LANE_SHARE, strict=True)}
    for i in range(out.nodes):
        h = host(i)
        tail = f'instance="{h}:9484",job="{SCRAPE_JOB}"'
        for n in range(NICS_PER_NODE):
            nic, dev, device = f"{h}/nic{n}", f"ens{n + 1}f0np0", f"mlx5_{n}"
            for lane in LANES:
                lane_tx.append(f'aiops_nic_transmit_bytes_total{{nic="{nic}",lane="{lane}",{tail}}} ')
                for name in ("drops", "ce_marks", "retransmits", "carrier_changes"):
                    c.append(f'aiops_nic_{name}_total{{nic="{nic}",lane="{lane}",{tail}}} 0')
                c.append(
                    f'aiops_nic_queue_delay_seconds{{node="{h}",nic="{nic}",lane="{lane}",{tail}}} 2e-05'
                )
            c.append(f'aiops_nic_link_up{{node="{h}",nic="{nic}",{tail}}} 1')
            for traffic_class, lane, rule_id in FLOWS:
                flow = f'node="{h}",nic="{nic}",traffic_class="{traffic_class}",lane="{lane}",rule_id="{rule_id}"'
                flow_tx.append(f"aiops_flow_class_transmit_bytes_total{{{flow},{tail}}} ")
            netdev = f'dev="{dev}",node="{h}",nic="{nic}",{tail}'
            port_bytes.append(f"aiops_netdev_receive_bytes_total{{{netdev}}} ")
            port_bytes.append(f"aiops_netdev_transmit_bytes_total{{{netdev}}} ")
            c.extend(f"aiops_netdev_{name}_total{{{netdev}}} 0" for name in NETDEV_ZERO)
            c.append(f"aiops_netdev_up{{{netdev}}} 1")
            ib = f'device="{device}",port="1",node="{h}",nic="{nic}",{tail}'
            c.extend(f"{name}{{{ib}}} 0" for name in IB_COUNTERS)
            port_bytes.append(f"aiops_ib_port_receive_bytes_total{{{ib}}} ")
            port_bytes.append(f"aiops_ib_port_transmit_bytes_total{{{ib}}} ")
    nics = out.nodes * NICS_PER_NODE
    lane_rate = np.tile(np.array([NIC_BPS * s for s in LANE_SHARE]), nics)
    flow_rate = np.tile(np.array([NIC_BPS * share[lane] for _, lane, _ in FLOWS]), nics)
    port_rate = np.full(len(port_bytes), NIC_BPS)
    step = out.step_s
    out.varying.append(Varying(lane_tx, lambda k: lane_rate * step * (k + 10_000)))
    out.varying.append(Varying(flow_tx, lambda k: flow_rate * step * (k + 10_000)))
    out.varying.append(Varying(port_bytes, lambda k: port_rate * step * (k + 10_000)))


def _hosts_and_job(out: Exports) -> None:
    c = out.constant
    for i in range(out.nodes):
        h = host(i)
        one = f'node="{h}",instance="{h}:9484",job="{SCRAPE_JOB}"'
        c.append(f"aiops_host_cpu_utilisation_ratio{{{one}}} 0.38")
        c.append(f"aiops_host_memory_used_ratio{{{one}}} 0.41")
        c.append(f"aiops_host_cpu_iowait_ratio{{{one}}} 0.004")
        c.append(f"aiops_host_loader_wait_seconds{{{one}}} 0.003")
    # the job's own families, exported by the agent of the rank-0 node (docs/METRICS.md: labelled with its node)
    h = host(0)
    job = f'node="{h}",job="{JOB}",instance="{h}:9484"'
    steps_per_scrape = out.step_s / STEP_TIME_S
    c.append(f'aiops_job_slowest_rank_steps_total{{{job},rank="5",gpu="{h}/gpu5"}} 3')
    for quantile, seconds in (("p50", "0.0042"), ("p99", "0.0071")):
        c.append(
            f'aiops_collective_latency_{quantile}_seconds{{{job},op="all_reduce",scope="inter_node"}} {seconds}'
        )
    c.append(f'aiops_collective_timeouts_total{{{job},op="all_reduce",scope="inter_node"}} 0')
    count = [
        f"aiops_job_step_duration_seconds_count{{{job}}} ",
        f"aiops_job_step_duration_seconds_sum{{{job}}} ",
    ]
    buckets = [f'aiops_job_step_duration_seconds_bucket{{{job},le="{le}"}} ' for le in STEP_BUCKETS_S]
    in_bucket = np.array([0.0 if float(le) < STEP_TIME_S else 1.0 for le in STEP_BUCKETS_S])
    ops = [
        f'aiops_collective_operations_total{{{job},op="all_reduce",scope="inter_node"}} ',
        f'aiops_collective_bytes_total{{{job},op="all_reduce",scope="inter_node"}} ',
    ]
    last = [
        f"aiops_job_last_step_duration_seconds{{{job}}} ",
        f"aiops_job_last_step_timestamp_seconds{{{job}}} ",
    ]
    start_s = out.start_s

    def steps(k: int) -> float:
        return float(np.floor(steps_per_scrape * (k + 10_000)))

    out.varying.append(Varying(count, lambda k: np.array([steps(k), steps(k) * STEP_TIME_S]), integer=False))
    out.varying.append(Varying(buckets, lambda k: in_bucket * steps(k)))
    out.varying.append(Varying(ops, lambda k: np.array([steps(k) * 64, steps(k) * 64 * 2.8e8])))
    out.varying.append(
        Varying(last, lambda k: np.array([STEP_TIME_S, start_s + k * out.step_s - 0.4]), integer=False)
    )
