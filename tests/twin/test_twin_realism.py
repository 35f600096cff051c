"""Issue 14 item 2: the twin's behaviours as their real sources give them (docs/SIMULATOR.md): the DCIM cap as a
signal input, the framework's straggler report with its gaps and noise, watchdog timeouts as events."""

from __future__ import annotations

import numpy as np
import pynvml
import pytest

from aiops.control.dcim_signals import dcim_caps_kw
from aiops.detect import detect
from aiops.detect.rules import Detector
from aiops.pipeline import analyze_store
from aiops.sim import World, gpu
from aiops.sim.fabric import STRAGGLER_REPORT_EVERY, STRAGGLER_REPORT_LOSS, _straggler_report
from aiops.sim.nvml import SimNvml
from aiops.sim.twin import Twin
from aiops.store import Store
from guardrails.actions import Action
from tests.simkit import FAULT_AT_S, FAULT_TS, fault, run, scenario


def test_dcim_caps_in_force_over_a_window() -> None:
    store = Store(":memory:")
    rows = [(100.0, "rack0", "cap", 20.0), (200.0, "rack0", "clear", None), (150.0, "fleet", "cap", 90.0)]
    for ts_s, scope, kind, kw in rows:
        store.ingest(
            "dcim_signals",
            {"ts_s": [ts_s], "scope": [scope], "kind": [kind], "budget_kw": [kw], "source": ["cli"]},
        )
    assert dcim_caps_kw(store, 90.0, 99.0) == {}
    assert dcim_caps_kw(store, 95.0, 105.0) == {"rack0": 20.0}
    assert dcim_caps_kw(store, 195.0, 205.0) == {"rack0": 20.0, "fleet": 90.0}  # cleared within the window
    assert dcim_caps_kw(store, 200.0, 210.0) == {"fleet": 90.0}  # cleared before it


def test_a_facility_cap_is_a_dcim_signal_and_the_detector_reads_it() -> None:
    store = run([fault("facility_power_cap", "rack1", 0.5, duration_s=60)])
    signals = store.query("SELECT ts_s, scope, kind, budget_kw > 0 AS kw FROM dcim_signals ORDER BY ts_s")
    assert signals == [
        {"ts_s": FAULT_TS, "scope": "rack1", "kind": "cap", "kw": True},
        {"ts_s": FAULT_TS + 60, "scope": "rack1", "kind": "clear", "kw": None},
    ]
    assert store.scalar("SELECT count(power_cap_kw) FROM rack_samples") == 0
    detector = Detector(store)
    caps = [
        (t, s.component)
        for t in range(int(FAULT_TS) - 30, int(FAULT_TS) + 100, 10)
        for s in detector.process(float(t), float(t + 10))
        if s.kind == "dcim_power_cap"
    ]
    assert {c for _, c in caps} == {"rack1"}
    assert min(t for t, _ in caps) + 10 >= FAULT_TS and max(t for t, _ in caps) < FAULT_TS + 60


def test_the_straggler_report_covers_some_steps_with_noise_and_gaps() -> None:
    store = run(duration_s=600)
    rows = store.query("SELECT step, slowest_rank, slowest_gpu FROM job_steps ORDER BY step")
    reported = [r for r in rows if r["slowest_gpu"] is not None]
    assert all(r["step"] % STRAGGLER_REPORT_EVERY == 0 for r in reported)
    due = sum(1 for r in rows if r["step"] % STRAGGLER_REPORT_EVERY == 0)
    assert 0.7 * due <= len(reported) <= due and len(reported) <= 0.1 * len(rows) + 1
    # healthy: near-ties, so the named rank wanders (no GPU is named in most reports)
    named = [r["slowest_gpu"] for r in reported]
    assert len(set(named)) >= 5 and max(named.count(g) for g in named) < 0.5 * len(named)


def test_straggler_reports_are_lost_at_their_rate_and_the_timer_blurs_near_ties() -> None:
    rng = np.random.default_rng(0)
    ready_s = np.array([1.0, 1.0, 1.0, 1.003])  # rank 3 is 0.3 % slower: within the timer's noise
    reports = [_straggler_report(rng, STRAGGLER_REPORT_EVERY, ready_s) for _ in range(2000)]
    lost = reports.count(None) / len(reports)
    assert abs(lost - STRAGGLER_REPORT_LOSS) < 0.03
    named = [r for r in reports if r is not None]
    assert 0.3 < named.count(3) / len(named) < 0.6  # named more often, far from always
    assert _straggler_report(rng, STRAGGLER_REPORT_EVERY + 1, ready_s) is None  # not a reporting step
    clear = np.array([1.0, 1.0, 1.15, 1.0])  # a real straggler (+15 %) is always named
    assert {_straggler_report(rng, 0, clear) for _ in range(200)} <= {2, None}


def test_a_flap_of_seconds_times_nothing_out() -> None:
    flap = run([fault("nic_link_flap", "node2/nic0", 0.9)])
    assert flap.scalar("SELECT sum(timeouts) FROM collective_samples") == 0
    assert flap.scalar("SELECT sum(carrier_changes) FROM nic_samples") > 0


def test_a_high_correctable_rate_xid_92_is_a_decoy_not_an_ecc_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    """Xid 92 (a weak HBM cell: many corrected single-bit errors) opens no incident; an ECC fault reports the
    uncorrectable DBE (Xid 48) with the row remapper's Xid 63 and crashes the rank."""
    monkeypatch.setattr(gpu, "SBE_BURST_PROBABILITY_PER_S", 2e-4)  # a few weak cells in a short run
    store = run()
    xids = store.query("SELECT DISTINCT xid FROM gpu_events")
    assert xids == [{"xid": 92}]
    assert store.scalar("SELECT max(ecc_sbe_total) FROM gpu_samples") >= gpu.SBE_BURST_ERRORS
    assert store.scalar("SELECT max(ecc_dbe_total) FROM gpu_samples") == 0
    assert detect(store) == []
    monkeypatch.undo()
    ecc = run([fault("gpu_ecc_error", "node2/gpu0", 0.4)])
    assert [r["xid"] for r in ecc.query("SELECT xid FROM gpu_events ORDER BY ts_s, xid")] == [48, 63]


def test_the_analyst_does_not_call_xid_92_an_uncorrectable_ecc_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "SBE_BURST_PROBABILITY_PER_S", 1e-3)
    store = run([fault("pcie_degraded", "node3/gpu1", 0.9)])
    decoys = {str(r["gpu"]) for r in store.query("SELECT gpu FROM gpu_events WHERE xid = 92")}
    assert decoys
    result = analyze_store(store)
    assert result.diagnoses and result.diagnoses[0].hypotheses[0].root_cause == "pcie_degraded"
    blamed = {h.component for d in result.diagnoses for h in d.hypotheses if h.root_cause == "gpu_ecc_error"}
    assert not blamed & decoys


def test_a_what_if_preview_knows_only_the_present() -> None:
    """The preview must not see a fault that has not begun, nor the end of one in progress."""
    faults = [
        fault("power_cap_misconfig", "node0/gpu1", 0.8, duration_s=60),  # 60..120: ends inside the horizon
        {"kind": "power_cap_misconfig", "target": "node1/gpu2", "start_s": 150, "severity": 0.8},  # later
    ]
    world = World(scenario(faults))
    while world.elapsed_s < FAULT_AT_S + 30:
        world.step(1.0)
    twin = Twin(world)
    action = Action(
        proposal_id="p1", kind="open_ticket", target="node0", proposed_by="analyst", created_ts_s=0.0
    )
    for gpu_name, limit_w in (("node0/gpu1", "lowered"), ("node1/gpu2", "default")):
        result = twin.preview(lambda w, a: None, action, gpu_name, 120.0)
        seen = result["without_action"]["power_limit_w"]
        assert (seen < 700.0) if limit_w == "lowered" else (seen == 700.0), (gpu_name, seen)
    assert world.elapsed_s == FAULT_AT_S + 30 and len(world.faults) == 2  # the twin itself is untouched


@pytest.fixture(scope="module")
def off_the_bus() -> Store:
    """node2/gpu1 off the bus for 100 s, simulated once for the two tests that read it."""
    return run([fault("gpu_fell_off_bus", "node2/gpu1", 0.9, duration_s=100)])


def test_a_gpu_off_the_bus_blocks_nvml_for_its_whole_node_for_a_while(off_the_bus: Store) -> None:
    """Real NVML often blocks node-wide when one GPU falls off the bus: the node's other GPUs time out too, for a
    while; only the lost GPU has Xid 79 and GPU_IS_LOST, and other nodes answer throughout."""
    store = off_the_bus
    hang_s = gpu.NVML_NODE_HANG_S
    rows = store.query(
        "SELECT gpu, nvml_error, count(*) AS n, min(ts_s) AS t0, max(ts_s) AS t1, count(temp_c) AS temps "
        "FROM gpu_samples WHERE nvml_error IS NOT NULL GROUP BY gpu, nvml_error ORDER BY gpu"
    )
    timeouts = {r["gpu"]: r for r in rows if r["nvml_error"] == "TIMEOUT"}
    assert set(timeouts) == {"node2/gpu0", "node2/gpu2", "node2/gpu3"}
    for r in timeouts.values():
        assert (
            r["t0"] == FAULT_TS and r["t1"] == FAULT_TS + hang_s - 1 and r["n"] == hang_s and r["temps"] == 0
        )
    assert [(r["gpu"], r["n"]) for r in rows if r["nvml_error"] == "GPU_IS_LOST"] == [("node2/gpu1", 100)]
    after = store.scalar(
        f"SELECT count(temp_c) FROM gpu_samples WHERE gpu = 'node2/gpu0' AND ts_s >= {FAULT_TS + hang_s}"
    )
    assert after > 0  # the node answers again once the driver is done with the loss
    errors = store.scalar("SELECT count(DISTINCT component) FROM collector_errors WHERE error = 'TIMEOUT'")
    assert errors == 3
    assert store.query("SELECT DISTINCT gpu, xid FROM gpu_events WHERE xid = 79") == [
        {"gpu": "node2/gpu1", "xid": 79}
    ]


def test_sim_nvml_times_out_for_the_node_while_it_hangs() -> None:
    world = World(scenario([fault("gpu_fell_off_bus", "node2/gpu1", 0.9, duration_s=100)]))
    nvml, other = SimNvml(world, 2), SimNvml(world, 1)
    for lib in (nvml, other):
        lib.nvmlInit()
    while world.elapsed_s < FAULT_AT_S + 1:
        world.step(1.0)
    with pytest.raises(pynvml.NVMLError) as info:
        nvml.nvmlDeviceGetTemperature(nvml.nvmlDeviceGetHandleByIndex(0), 0)
    assert info.value.value == pynvml.NVML_ERROR_TIMEOUT
    assert other.nvmlDeviceGetTemperature(other.nvmlDeviceGetHandleByIndex(0), 0) > 0
    while world.elapsed_s < FAULT_AT_S + gpu.NVML_NODE_HANG_S + 1:
        world.step(1.0)
    assert nvml.nvmlDeviceGetTemperature(nvml.nvmlDeviceGetHandleByIndex(0), 0) > 0


def test_the_analyst_pins_a_node_wide_nvml_hang_on_the_gpu_with_xid_79(off_the_bus: Store) -> None:
    store = off_the_bus
    assert store.scalar("SELECT count(*) FROM gpu_samples WHERE nvml_error = 'TIMEOUT'") > 0
    store.conn.execute(
        "BEGIN TRANSACTION"
    )  # what the analysis stores, undone after: the run stays as simulated
    try:
        result = analyze_store(store)
    finally:
        store.conn.execute("ROLLBACK")
    assert result.diagnoses
    top = result.diagnoses[0].hypotheses[0]
    assert (top.root_cause, top.component) == ("gpu_fell_off_bus", "node2/gpu1")
    blamed = {
        h.component for d in result.diagnoses for h in d.hypotheses if h.root_cause == "gpu_fell_off_bus"
    }
    assert blamed == {"node2/gpu1"}
