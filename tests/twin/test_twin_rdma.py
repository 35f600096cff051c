"""Issue 14 item 2, the last two twin behaviours: the RDMA NIC's own counters (ib_port_samples, as
collectors/infiniband.py reads them from /sys/class/infiniband). IB transport retries hide a short link flap
(local_ack_timeout_err rises, no error); a longer outage exhausts them (req_transport_retries_exceeded, NCCL's
completion status 12, the job restarts). On RoCE the switch marks CE and the HCAs count it (np_ecn_marked,
np_cnp_sent, rp_cnp_handled); a port without ECN shows none of that, but out-of-sequence packets instead."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pytest

from aiops.agent.verify import SUPPORT
from aiops.detect import detect
from aiops.errors import ScenarioError
from aiops.evidence.nccl import parse_line
from aiops.models import Incident
from aiops.rca import diagnose
from aiops.sim import SIM_EPOCH_TS_S, World, simulate
from aiops.sim.faults import LONG_FLAP_SEVERITY
from aiops.sim.rdma import RETRY_WINDOW_S
from aiops.store import Store
from collectors.schema import columns
from tests.simkit import scenario

NEW_COLUMNS = ("local_ack_timeout_err", "req_transport_retries_exceeded")
PAUSE_COLUMNS = ("rx_pause_frames", "tx_pause_frames")


def test_an_old_store_gains_the_retry_counters_as_null(tmp_path: Path) -> None:
    """Migration 13 on a workspace made before it: the columns appear, rows stored before them read NULL."""
    path = tmp_path / "old.duckdb"
    Store(path).close()
    conn = duckdb.connect(str(path))
    for column in NEW_COLUMNS:
        conn.execute(f"ALTER TABLE ib_port_samples DROP COLUMN {column}")
    conn.execute("DELETE FROM schema_migrations WHERE version = 13")
    for column in PAUSE_COLUMNS:  # and migration 14's pause frames of netdev_samples
        conn.execute(f"ALTER TABLE netdev_samples DROP COLUMN {column}")
    conn.execute("DELETE FROM schema_migrations WHERE version = 14")
    conn.execute(
        "INSERT INTO ib_port_samples (ts_s, node, device, port, link_downed) VALUES (1, 'node0', 'mlx5_0', 1, 2)"
    )
    conn.close()
    with Store(path) as store:
        row = store.query("SELECT * FROM ib_port_samples")[0]
        assert row["link_downed"] == 2 and all(row[c] is None for c in NEW_COLUMNS)
        assert store.scalar("SELECT max(version) FROM schema_migrations") >= 13
        stored = [
            r["column_name"]
            for r in store.query(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'ib_port_samples' ORDER BY ordinal_position"
            )
        ]
        assert stored == list(columns("ib_port_samples"))
        netdev = [
            r["column_name"]
            for r in store.query(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'netdev_samples' ORDER BY ordinal_position"
            )
        ]
        assert netdev == list(columns("netdev_samples"))


# -- transport retries over a flapping link -------------------------------------------------------------------
FLAP_NIC, SENDER_NIC = "node1/nic0", "node0/nic0"  # node0 precedes node1 in the job's ring on rail 0


def _flap_run(severity: float, duration_s: float = 100.0) -> tuple[World, Store]:
    spec = scenario(
        [
            {
                "kind": "nic_link_flap",
                "target": FLAP_NIC,
                "start_s": 60,
                "duration_s": duration_s,
                "severity": severity,
            }
        ],
        duration_s=240,
    )
    world, store = World(spec), Store(":memory:")
    simulate(spec, store, world=world)
    return world, store


@pytest.fixture(scope="module")
def long_flap() -> tuple[World, Store]:
    """The outage longer than the retry window, simulated once for the tests that read it (none writes)."""
    return _flap_run(0.95, duration_s=60.0)


@contextmanager
def _rolled_back(store: Store) -> Iterator[None]:
    """What a test writes into a module fixture's store, undone after it (a transaction rolled back)."""
    store.conn.execute("BEGIN TRANSACTION")
    try:
        yield
    finally:
        store.conn.execute("ROLLBACK")


def _last(store: Store, nic: str) -> dict[str, Any]:
    return store.query("SELECT * FROM ib_port_samples WHERE nic = ? ORDER BY ts_s DESC LIMIT 1", [nic])[0]


def test_short_flaps_are_absorbed_by_transport_retries() -> None:
    """Flaps of 1-3 s, far shorter than the retry window (4.096 us x 2^20 x 8 = 34 s): the HCA counts its ack
    timer expiring (and so does the ring peer that sends to it), the port counts link_downed and
    link_error_recovery, no QP gives up, NCCL logs nothing, the job does not restart."""
    assert RETRY_WINDOW_S > 30  # 4.096 us x 2^20 x (7 + 1)
    world, store = _flap_run(0.6)
    flap = _last(store, FLAP_NIC)
    assert flap["link_downed"] >= 2 and flap["link_error_recovery"] >= flap["link_downed"]
    assert flap["local_ack_timeout_err"] > 0 and flap["req_transport_retries_exceeded"] == 0
    assert _last(store, SENDER_NIC)["local_ack_timeout_err"] > 0
    quiet = _last(store, "node2/nic1")
    assert quiet["link_downed"] == 0 and quiet["local_ack_timeout_err"] == 0
    states = {
        (r["state"], r["phys_state"])
        for r in store.query("SELECT state, phys_state FROM ib_port_samples WHERE nic = ?", [FLAP_NIC])
    }
    assert states == {("ACTIVE", "LinkUp"), ("DOWN", "Polling")}
    assert store.scalar("SELECT count(*) FROM log_events") == 0
    assert float(world.restart_until_s.max()) < 0  # never relaunched


def test_an_outage_longer_than_the_retry_window_errors_and_restarts_the_job(
    long_flap: tuple[World, Store],
) -> None:
    """Severity >= 0.9: the first outage outlasts the retry window. The QPs give up
    (req_transport_retries_exceeded), the rank's NCCL logs one completion with status 12, and the job restarts
    (no step completes for the relaunch pause)."""
    world, store = long_flap
    flap = _last(store, FLAP_NIC)
    assert flap["req_transport_retries_exceeded"] > 0
    assert flap["local_ack_timeout_err"] >= 7  # the retries it used before giving up
    (line,) = store.query("SELECT * FROM log_events")
    assert (line["kind"], line["code"], line["host"]) == ("ib_completion_error", 12, "node1")
    assert "with status=12" in line["raw"] and "vendor err 129" in line["raw"]
    fault_ts = SIM_EPOCH_TS_S + 60
    assert fault_ts + RETRY_WINDOW_S <= line["ts_s"] <= fault_ts + RETRY_WINDOW_S + 2
    assert float(world.restart_until_s.max()) > 60 + RETRY_WINDOW_S  # torchrun relaunched it
    steps_after = store.query(
        "SELECT ts_s FROM job_steps WHERE ts_s > ? ORDER BY ts_s LIMIT 1", [line["ts_s"]]
    )
    assert steps_after and steps_after[0]["ts_s"] - line["ts_s"] >= 60  # relaunch: NCCL init, checkpoint load


def test_the_twins_error_line_reads_as_nccls_own(long_flap: tuple[World, Store]) -> None:
    """The line parses with the evidence parser that reads real NCCL logs, to the row the twin stored."""
    _, store = long_flap
    (line,) = store.query("SELECT * FROM log_events")
    event = parse_line(str(line["source"]), int(line["line"]), str(line["raw"]))
    assert event is not None and (event.kind, event.code, event.host) == ("ib_completion_error", 12, "node1")
    assert event.detail["peer"].startswith("198.18.0.1<")


def test_milder_flaps_never_exhaust_the_retries() -> None:
    """Every severity below the threshold keeps the old 1-3 s outages (scenarios written before keep their
    behaviour)."""
    _, store = _flap_run(LONG_FLAP_SEVERITY - 0.01)
    assert _last(store, FLAP_NIC)["req_transport_retries_exceeded"] == 0
    assert store.scalar("SELECT count(*) FROM log_events") == 0


# -- RoCE ECN on the HCA counters ------------------------------------------------------------------------------
ECN_NIC = "node1/nic0"


def _ecn_store() -> tuple[Store, list[Incident]]:
    spec = scenario(
        [{"kind": "ecn_misconfig", "target": ECN_NIC, "start_s": 60, "severity": 0.7}], duration_s=200
    )
    store = Store(":memory:")
    simulate(spec, store)
    return store, detect(store)


@pytest.fixture(scope="module")
def ecn() -> tuple[Store, list[Incident]]:
    """The ECN case, simulated and detected once; the tests that write into it do so in `_rolled_back`."""
    return _ecn_store()


@pytest.fixture(scope="module")
def lossless() -> tuple[Store, list[Incident]]:
    """The ECN case on a lossless fabric, simulated and detected once (writes in `_rolled_back`)."""
    return _lossless_store()


def _top_hypotheses(store: Store, incidents: list[Incident]) -> list[tuple[str, str]]:
    return [(h.root_cause, h.component) for d in diagnose(store, incidents) for h in d.hypotheses[:3]]


def test_a_port_without_ecn_sends_no_cnps_where_its_peers_do(ecn: tuple[Store, list[Incident]]) -> None:
    store, _ = ecn
    during = {
        str(r["nic"]): r
        for r in store.query(
            "SELECT nic, max(np_cnp_sent) - min(np_cnp_sent) AS cnp, max(out_of_sequence) - min(out_of_sequence) AS oos, "
            "max(np_ecn_marked_roce_packets) - min(np_ecn_marked_roce_packets) AS marked "
            "FROM ib_port_samples WHERE ts_s > ? GROUP BY nic",
            [SIM_EPOCH_TS_S + 61],
        )
    }
    assert during[ECN_NIC]["cnp"] == 0 and during[ECN_NIC]["marked"] == 0 and during[ECN_NIC]["oos"] > 100
    peers = [r for nic, r in during.items() if nic != ECN_NIC]
    assert all(r["cnp"] > 100 and r["marked"] > r["cnp"] for r in peers)
    handled = store.query(
        "SELECT nic, max(rp_cnp_handled) - min(rp_cnp_handled) AS handled FROM ib_port_samples WHERE ts_s > ? "
        "GROUP BY nic ORDER BY handled LIMIT 1",
        [SIM_EPOCH_TS_S + 61],
    )
    assert (
        handled[0]["nic"] == "node0/nic0" and handled[0]["handled"] == 0
    )  # its ring predecessor hears nothing


def test_the_analyst_names_ecn_misconfig_from_the_hca_counters_alone(
    ecn: tuple[Store, list[Incident]],
) -> None:
    """With the host's CE marks gone (nic_samples.ce_marks NULL: RDMA bypasses the kernel), the HCA's CNP counters
    name the NIC; without HCA rows as well, nothing does; a host without RDMA still gets the CE-mark rule."""
    store, incidents = ecn
    assert incidents
    assert ("ecn_misconfig", ECN_NIC) in _top_hypotheses(store, incidents)
    with _rolled_back(store):
        store.conn.execute("UPDATE nic_samples SET ce_marks = NULL")
        found = _top_hypotheses(store, incidents)
        assert found[0] == ("ecn_misconfig", ECN_NIC), found
        store.conn.execute("DELETE FROM ib_port_samples")
        assert ("ecn_misconfig", ECN_NIC) not in _top_hypotheses(store, incidents)


def test_hosts_without_rdma_keep_the_ce_mark_rule(ecn: tuple[Store, list[Incident]]) -> None:
    store, incidents = ecn
    with _rolled_back(store):
        store.conn.execute("DELETE FROM ib_port_samples")
        assert ("ecn_misconfig", ECN_NIC) in _top_hypotheses(store, incidents)
        store.conn.execute("UPDATE nic_samples SET ce_marks = NULL")
        assert ("ecn_misconfig", ECN_NIC) not in _top_hypotheses(store, incidents)


def test_a_rolled_back_write_leaves_the_shared_run_as_simulated(ecn: tuple[Store, list[Incident]]) -> None:
    """The module's shared runs stay as simulated after a test's writes (each test above sees the run itself)."""
    store, _ = ecn
    rows = store.scalar("SELECT count(*) FROM ib_port_samples")
    marks = store.scalar("SELECT count(ce_marks) FROM nic_samples")
    with _rolled_back(store):
        store.conn.execute("DELETE FROM ib_port_samples")
        store.conn.execute("UPDATE nic_samples SET ce_marks = NULL")
    assert rows > 0 and marks > 0
    assert (
        store.scalar("SELECT count(*) FROM ib_port_samples"),
        store.scalar("SELECT count(ce_marks) FROM nic_samples"),
    ) == (rows, marks)


def test_the_analyst_still_names_a_flap_that_crashed_the_job(long_flap: tuple[World, Store]) -> None:
    """A long outage restarts the job (idle GPUs, no steps for a minute): the cause stays the flapping NIC."""
    _, store = long_flap
    incidents = detect(store)
    assert incidents
    assert _top_hypotheses(store, incidents)[0] == ("nic_link_flap", FLAP_NIC)


def test_an_llm_claim_citing_the_hca_counters_can_verify_ecn_misconfig() -> None:
    """The agent's verifier accepts the HCA view the analyst now uses (CNPs silent, packets out of sequence) and
    still refuses a NIC that sends CNPs, or a cumulative total it cannot read as silence."""
    check = SUPPORT["ecn_misconfig"][1]
    assert check({"nic": ECN_NIC, "oos_per_s": 16.4, "cnp_sent_per_s": 0.0})
    assert check({"nic": ECN_NIC, "out_of_sequence": 3279, "np_cnp_sent": 0})
    assert not check({"nic": ECN_NIC, "oos_per_s": 16.4, "cnp_sent_per_s": 15.2})
    assert not check({"nic": ECN_NIC, "out_of_sequence": 3279, "np_cnp_sent": 1888})
    assert not check({"nic": ECN_NIC, "oos_per_s": 0.0, "cnp_sent_per_s": 0.0})


# -- a lossless (PFC) RoCE fabric: pauses instead of drops ------------------------------------------------------
def _lossless_store() -> tuple[Store, list[Incident]]:
    spec = scenario(
        [{"kind": "ecn_misconfig", "target": ECN_NIC, "start_s": 60, "severity": 0.7}],
        duration_s=200,
        fabric="lossless",
    )
    store = Store(":memory:")
    simulate(spec, store)
    return store, detect(store)


def test_a_lossless_fabric_pauses_the_sender_instead_of_dropping(
    lossless: tuple[Store, list[Incident]],
) -> None:
    store, _ = lossless
    after = [SIM_EPOCH_TS_S + 61]
    pauses = {
        str(r["nic"]): r["rx"]
        for r in store.query(
            "SELECT nic, max(rx_pause_frames) - min(rx_pause_frames) AS rx FROM netdev_samples WHERE ts_s > ? "
            "GROUP BY nic",
            after,
        )
    }
    assert pauses[SENDER_NIC] > 1000 and all(v == 0 for nic, v in pauses.items() if nic != SENDER_NIC)
    target = store.query(
        "SELECT max(out_of_sequence) - min(out_of_sequence) AS oos, max(np_cnp_sent) - min(np_cnp_sent) AS cnp "
        "FROM ib_port_samples WHERE nic = ? AND ts_s > ?",
        [ECN_NIC, *after],
    )[0]
    assert target == {"oos": 0, "cnp": 0}
    assert (
        store.scalar("SELECT sum(drops) FROM nic_samples WHERE nic = ? AND ts_s > ?", [ECN_NIC, *after]) < 5
    )
    assert store.scalar("SELECT count(*) FROM netdev_samples WHERE tx_pause_frames > 0") == 0


def test_the_analyst_names_ecn_misconfig_on_a_lossless_fabric_from_pauses_and_silent_cnps(
    lossless: tuple[Store, list[Incident]],
) -> None:
    store, incidents = lossless
    assert incidents
    with _rolled_back(store):
        store.conn.execute("UPDATE nic_samples SET ce_marks = NULL")
        assert _top_hypotheses(store, incidents)[0] == ("ecn_misconfig", ECN_NIC)
        store.conn.execute(
            "UPDATE netdev_samples SET rx_pause_frames = NULL"
        )  # a driver without pause counters
        assert ("ecn_misconfig", ECN_NIC) not in _top_hypotheses(store, incidents)


def test_the_fabric_key_is_optional_and_checked() -> None:
    assert scenario([]).fabric == "lossy"
    with pytest.raises(ScenarioError, match="lossy, lossless"):
        scenario([], fabric="pfc")
