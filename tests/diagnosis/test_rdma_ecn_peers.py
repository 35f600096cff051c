"""Issue 40, hidden-suite robustness: RoCE ECN judged under the same load. Two jobs share a lossless fabric; a
NIC of the busier job whose switch port marks no CE sends fewer CNPs than its own job's NICs, yet still more than
the quieter job's NICs send (their queues congest less). Compared with every NIC it looks ordinary; compared with
the NICs its own job's ranks send through, it is the silent one (aiops/rca/rdma_scorers.py). Rows written into a
real workspace; the scorer reads them through the analyst's own facts."""

from __future__ import annotations

from aiops.rca.facts import Facts, Window
from aiops.rca.rdma_scorers import roce_ecn
from aiops.store import Store

QUIET_CNP_PER_S, BUSY_CNP_PER_S, SILENT_CNP_PER_S = 5.0, 15.0, 2.0
QUIET_WORDS_PER_S, BUSY_WORDS_PER_S = 6e7, 1.1e8


def _workspace() -> Store:
    store = Store(":memory:")
    nics: list[tuple[str, str, float, float]] = []  # nic, job, CNPs/s, words/s
    for n in range(4):
        nics.append((f"node{n}/nic0", "quiet", QUIET_CNP_PER_S, QUIET_WORDS_PER_S))
        busy_cnp = SILENT_CNP_PER_S if n == 1 else BUSY_CNP_PER_S  # node5/nic0: its port's ECN off
        nics.append((f"node{n + 4}/nic0", "busy", busy_cnp, BUSY_WORDS_PER_S))
    for nic, job, cnp, words in nics:
        node = nic.split("/")[0]
        store.conn.execute(
            "INSERT INTO job_ranks (job, rank, gpu, node, nic) VALUES (?, ?, ?, ?, ?)",
            [job, int(node.removeprefix("node")), f"{node}/gpu0", node, nic],
        )
        for t in (0.0, 100.0, 200.0):
            store.conn.execute(
                "INSERT INTO ib_port_samples (ts_s, node, device, port, nic, link_downed, port_rcv_data, "
                "np_cnp_sent, rp_cnp_handled, np_ecn_marked_roce_packets, out_of_sequence) "
                "VALUES (?, ?, 'mlx5_0', 1, ?, 0, ?, ?, ?, ?, 0)",
                [t, node, nic, int(words * t), int(cnp * t), int(cnp * t), int(2 * cnp * t)],
            )
            paused = nic == "node6/nic0" and t > 100.0  # a sender the full queue pauses (lossless)
            store.conn.execute(
                "INSERT INTO netdev_samples (ts_s, node, dev, nic, rx_pause_frames) VALUES (?, ?, 'eth0', ?, ?)",
                [t, node, nic, 5000 if paused else 0],
            )
    return store


def test_a_nic_silent_among_its_own_jobs_nics_is_named() -> None:
    with _workspace() as store:
        facts = Facts(
            store, Window(run_start_s=0.0, start_s=0.0, end_s=200.0, baseline_end_s=100.0, opened_s=100.0)
        )
        found = [(c.label, c.component) for c in roce_ecn(facts)]
    assert found == [("ecn_misconfig", "node5/nic0")]
