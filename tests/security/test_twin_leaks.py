"""Issue 14 item 2: the twin does not leak its faults. For a run of every fault kind, every column of every stored
table with a timestamp is compared, per entity (GPU, NIC, rack, job and op, ...), with the injected fault's
on/off state as a time series: a column that is non-null, non-zero or names the fault's target exactly while
the fault is on (and not otherwise) is a function of the fault model, not of anything a real source reports.

Columns that a real source does report while such a fault lasts (NVML's clocks-event reasons under a cap, the
carrier state of a flapping link, NVML's GPU_IS_LOST) are listed in OBSERVED with their source
(docs/SIMULATOR.md, "What is observable, and by whom"); everything else that matches fails the test.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from aiops.sim import SIM_EPOCH_TS_S, World, simulate
from aiops.store import Store
from tests.simkit import scenario

START_S, FAULT_S, DURATION_S = 90.0, 150.0, 360.0  # the fault ends well before the run: counters that only
# grow (ECC, replays) then stay up after it and are not "on exactly while the fault is on"
ENTITY_KEYS = ("gpu", "node", "nic", "rack", "job", "op", "scope", "lane", "traffic_class", "component")
MIN_ON, MIN_OFF = (
    10,
    10,
)  # samples of an entity inside and outside the fault for a comparison to mean anything
PRECISION, RECALL = 0.97, 0.8  # "on only while the fault is on" and "on for most of it" (lags are allowed)

TARGETS: dict[str, str] = {
    "thermal_throttle": "node3/gpu2",
    "rack_cooling_failure": "rack1",
    "power_cap_misconfig": "node1",
    "facility_power_cap": "rack1",
    "power_brake": "node1",
    "gpu_ecc_error": "node2/gpu1",
    "gpu_fell_off_bus": "node0/gpu3",
    "nvlink_degraded": "node2/gpu0",
    "pcie_degraded": "node3/gpu1",
    "bulk_traffic_contention": "node0/nic1",
    "lane_misclassification": "node1/nic0",
    "nic_link_flap": "node1/nic0",
    "ecn_misconfig": "node3/nic0",
    "input_pipeline_bottleneck": "node2",
    "application_error": "node1/gpu2",
    "ambient_drift": "fleet",
}

# (table, column) -> (fault kinds, the real source that reports it while such a fault lasts)
OBSERVED: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    ("gpu_samples", "clocks_event_reasons"): (
        frozenset({"power_cap_misconfig", "facility_power_cap", "power_brake", "thermal_throttle"}),
        "nvmlDeviceGetCurrentClocksEventReasons: SwPowerCap / HW slowdown bits while the cap or brake holds",
    ),
    ("gpu_samples", "nvml_error"): (
        frozenset({"gpu_fell_off_bus"}),
        "NVML answers NVML_ERROR_GPU_IS_LOST for a GPU off the bus until it is reset, and NVML_ERROR_TIMEOUT for the "
        "node's other GPUs while the driver handles the loss (Xid 79, NVIDIA Xid catalogue)",
    ),
    ("nic_samples", "link_up"): (frozenset({"nic_link_flap"}), "/sys/class/net/*/carrier"),
    ("nic_samples", "drops"): (
        frozenset({"nic_link_flap", "ecn_misconfig"}),
        "tx_dropped/tx_carrier_errors while the carrier is down; without ECN a congested queue drops what it "
        "would have marked (RFC 3168 section 5)",
    ),
    ("nic_samples", "retransmits"): (
        frozenset({"nic_link_flap", "ecn_misconfig"}),
        "TCP retransmits what was dropped (tcp:tcp_retransmit_skb)",
    ),
    **{
        ("ib_port_samples", column): (
            frozenset({"nic_link_flap"}),
            "/sys/class/infiniband/*/ports/*/{state,phys_state} and the IBA PortCounters in counters/ while the "
            "link is down or has just been (Documentation/ABI/stable/sysfs-class-infiniband)",
        )
        for column in (
            "state",
            "phys_state",
            "link_downed",
            "link_error_recovery",
            "symbol_error",
            "port_xmit_discards",
        )
    },
    ("ib_port_samples", "local_ack_timeout_err"): (
        frozenset({"nic_link_flap"}),
        "mlx5 hw_counters: a QP's ack timer expired with retries left (NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT)",
    ),
    ("ib_port_samples", "req_transport_retries_exceeded"): (
        frozenset({"nic_link_flap"}),
        "mlx5 hw_counters (Linux >= 6.11, commit b339e0a): the retry limit ran out during a long outage",
    ),
    **{
        ("ib_port_samples", column): (
            frozenset({"ecn_misconfig"}),
            "mlx5 hw_counters (RoCE congestion control, DCQCN): CE-marked packets received, CNPs sent and "
            "handled; packets received out of PSN order after the switch's queue dropped some",
        )
        for column in ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled", "out_of_sequence")
    },
    ("netdev_samples", "rx_pause_frames"): (
        frozenset({"ecn_misconfig"}),
        "ethtool rx_prio<N>_pause (mlx5): on a lossless fabric the switch pauses a sender whose queue does not mark",
    ),
    ("log_events", "raw"): (
        frozenset({"nic_link_flap"}),
        "the rank's NCCL log: 'NET/IB : Got completion from peer ... with status=12' (IBV_WC_RETRY_EXC_ERR)",
    ),
}


@dataclass(frozen=True)
class Leak:
    table: str
    column: str
    entity: tuple[Any, ...]
    state: str
    how: str
    precision: float
    recall: float

    def __str__(self) -> str:
        return (
            f"{self.table}.{self.column} {self.how} {self.entity} follows {self.state} "
            f"(precision {self.precision:.2f}, recall {self.recall:.2f})"
        )


def run(kind: str) -> tuple[Store, dict[str, Callable[[float], bool]]]:
    """Simulate one fault into a store; return it with the fault's state as functions of a sample's ts_s: the
    fault window and, for a flap, the seconds the fault held the link down (read from the world as it ran,
    never from telemetry)."""
    spec = _scenario(kind)
    world = World(spec)
    held_down: set[float] = set()
    nic = world.layout.nic_index.get(TARGETS[kind])
    world_step = world.step

    def step(dt_s: float = 1.0) -> None:
        world_step(dt_s)
        if kind == "nic_link_flap" and nic is not None and not world.link_up[nic]:
            held_down.add(world.now_ts_s)

    world.step = step  # type: ignore[method-assign]
    store = Store(":memory:")
    simulate(spec, store, world=world)

    def window(ts_s: float) -> bool:
        return START_S <= ts_s - SIM_EPOCH_TS_S < START_S + FAULT_S

    states: dict[str, Callable[[float], bool]] = {"fault window": window}
    if kind == "nic_link_flap":
        assert len(held_down) >= MIN_ON, "the flap scenario must hold the link down long enough to compare"
        states["link held down"] = lambda ts_s: ts_s in held_down
    return store, states


def _scenario(kind: str) -> Any:
    target = TARGETS[kind]
    fault = {"kind": kind, "target": target, "start_s": START_S, "duration_s": FAULT_S, "severity": 0.8}
    return scenario([fault], duration_s=DURATION_S)


def _indicators(value: Any, target: str) -> dict[str, bool]:
    out = {"is non-null for": value is not None}
    if isinstance(value, bool | int | float):
        out["is non-zero for"] = bool(value)
    if isinstance(value, str):
        out["names the target for"] = value == target or value.startswith(target + "/")
    return out


def leaks(store: Store, kind: str, states: dict[str, Callable[[float], bool]]) -> list[Leak]:
    target = TARGETS[kind]
    found: list[Leak] = []
    tables = [
        str(r["table_name"])
        for r in store.query(
            "SELECT DISTINCT table_name FROM information_schema.columns WHERE column_name = 'ts_s' "
            "ORDER BY table_name"
        )
    ]
    for table in tables:
        rows = store.query(f'SELECT * FROM "{table}"')  # table names from the catalogue
        if not rows:
            continue
        keys = [k for k in ENTITY_KEYS if k in rows[0]]
        for column in rows[0]:
            if column == "ts_s" or column in keys:
                continue
            found += _column_leaks(table, column, rows, keys, states, target)
    return found


def _column_leaks(
    table: str,
    column: str,
    rows: list[dict[str, Any]],
    keys: list[str],
    states: dict[str, Callable[[float], bool]],
    target: str,
) -> list[Leak]:
    series: dict[tuple[Any, ...], list[tuple[float, dict[str, bool]]]] = defaultdict(list)
    for r in rows:
        series[tuple(r[k] for k in keys)].append((float(r["ts_s"]), _indicators(r[column], target)))
    found: list[Leak] = []
    for entity, points in series.items():
        for state_name, state in states.items():
            on = [state(ts) for ts, _ in points]
            if sum(on) < MIN_ON or len(on) - sum(on) < MIN_OFF:
                continue
            for how in points[0][1]:
                marks = [ind.get(how, False) for _, ind in points]
                hits = sum(m and o for m, o in zip(marks, on, strict=True))
                if not hits:
                    continue
                precision, recall = hits / sum(marks), hits / sum(on)
                if precision >= PRECISION and recall >= RECALL:
                    found.append(Leak(table, column, entity, state_name, how, precision, recall))
    return found


def unexplained(found: list[Leak], kind: str) -> list[Leak]:
    return [
        leak
        for leak in found
        if kind not in OBSERVED.get((leak.table, leak.column), (frozenset[str](), ""))[0]
    ]


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_no_stored_column_follows_the_injected_fault(kind: str) -> None:
    store, states = run(kind)
    bad = unexplained(leaks(store, kind, states), kind)
    assert not bad, f"{kind}: columns that follow the fault's state:\n" + "\n".join(
        sorted({str(b) for b in bad})
    )


def test_the_leak_test_catches_a_leak() -> None:
    """A column written from the fault's own state (what `rack_samples.power_cap_kw` was) is caught."""
    store, states = run("thermal_throttle")
    store.conn.execute(
        "UPDATE rack_samples SET power_cap_kw = 12.5 WHERE ts_s >= ? AND ts_s < ?",
        [SIM_EPOCH_TS_S + START_S, SIM_EPOCH_TS_S + START_S + FAULT_S],
    )
    bad = unexplained(leaks(store, "thermal_throttle", states), "thermal_throttle")
    assert {(b.table, b.column) for b in bad} == {("rack_samples", "power_cap_kw")}
