"""A link down for whole detection windows on a fleet whose NICs all run one FIFO (lanes off): the NIC sends
nothing, so no row of it is in the `fifo` lane with traffic. Counted as "lanes enforced there", it told every
other NIC that its lanes were missing: the generated seed 77201's `gen-nic-link-flap-00` opened six incidents for
one flap (the flap's and five `lane_enforcement_missing`). Lanes are enforced where a NIC sent through them
(aiops/detect/network_rules.py, aiops/rca/fabric_scorers.py: `laned`); a silent NIC says nothing either way."""

from __future__ import annotations

from pathlib import Path

from aiops.rca.fabric_scorers import nics_and_lanes
from aiops.rca.facts import Facts, Window
from aiops.scenarios import load_scenario
from aiops.store import Store
from evals.harness import score_case

SCENARIOS = Path(__file__).resolve().parents[2] / "evals" / "scenarios"


def test_a_link_down_on_a_fifo_fleet_is_one_incident_of_the_flap() -> None:
    scenario = load_scenario(SCENARIOS / "fifo-fleet-link-down-whole-windows.yaml")
    with Store(":memory:") as store:
        case = score_case(scenario, store)
        incidents = store.query("SELECT incident_id, title FROM incidents ORDER BY opened_ts_s")
    assert case["predicted"][0]["root_cause"] == "nic_link_flap", case["predicted"]
    assert case["predicted"][0]["component"] == "node2/nic0", case["predicted"]
    assert len(incidents) == 1, incidents
    assert case["false_positives"] == 0


def _nic_rows(store: Store, nic: str, lane: str, tx_bytes: int, queue_ms: float, t_s: float) -> None:
    store.conn.execute(
        "INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s, tx_bytes, tx_packets, drops, ce_marks, "
        "retransmits, queue_delay_ms, carrier_changes, link_up) VALUES (?, ?, ?, ?, 1.0, ?, 0, 0, 0, 0, ?, 0, ?)",
        [t_s, nic, nic.split("/")[0], lane, tx_bytes, queue_ms, tx_bytes > 0],
    )


def _candidates(other_lane: str, other_tx_bytes: int) -> list[tuple[str, str, float]]:
    """Four NICs in one FIFO each; node0/nic0's queue doubles in the incident; node3/nic0's one row then is in
    `other_lane` with `other_tx_bytes` (0: its link down)."""
    with Store(":memory:") as store:
        for t in range(0, 200, 10):
            incident = t >= 100
            for n in range(3):
                queue_ms = 4.0 if incident and n == 0 else 1.0
                _nic_rows(store, f"node{n}/nic0", "fifo", 10**9, queue_ms, float(t))
            lane, tx_bytes = (other_lane, other_tx_bytes) if incident else ("fifo", 10**9)
            _nic_rows(store, "node3/nic0", lane, tx_bytes, 1.0, float(t))
        facts = Facts(
            store, Window(run_start_s=0.0, start_s=0.0, end_s=200.0, baseline_end_s=100.0, opened_s=100.0)
        )
        return [
            (c.label, c.component, c.score)
            for c in nics_and_lanes(facts)
            if c.label == "bulk_traffic_contention"
        ]


def test_a_silent_nic_is_no_sign_that_lanes_are_enforced_elsewhere() -> None:
    # a congested FIFO among FIFOs: contention where it stands out (0.55), not the 0.88 of "lanes are enforced on
    # another NIC but not here", whichever lane the silent NIC's row names
    for lane in ("fifo", "vip"):
        assert _candidates(lane, 0) == [("bulk_traffic_contention", "node0/nic0", 0.55)], lane
    # a NIC that does send through its lanes is enforcement elsewhere: every congested or busy FIFO is suspect
    found = _candidates("vip", 10**9)
    assert ("bulk_traffic_contention", "node0/nic0", 0.88) in found, found
