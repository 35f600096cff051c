"""Issue 14 item 2, the last two twin behaviours: the RDMA NIC's own counters (ib_port_samples, as
collectors/infiniband.py reads them from /sys/class/infiniband). IB transport retries hide a short link flap
(local_ack_timeout_err rises, no error); a longer outage exhausts them (req_transport_retries_exceeded, NCCL's
completion status 12, the job restarts). On RoCE the switch marks CE and the HCAs count it (np_ecn_marked,
np_cnp_sent, rp_cnp_handled); a port without ECN shows none of that, but out-of-sequence packets instead."""

from __future__ import annotations

from pathlib import Path

import duckdb

from aiops.store import Store
from collectors.schema import columns

NEW_COLUMNS = ("local_ack_timeout_err", "req_transport_retries_exceeded")


def test_an_old_store_gains_the_retry_counters_as_null(tmp_path: Path) -> None:
    """Migration 13 on a workspace made before it: the columns appear, rows stored before them read NULL."""
    path = tmp_path / "old.duckdb"
    Store(path).close()
    conn = duckdb.connect(str(path))
    for column in NEW_COLUMNS:
        conn.execute(f"ALTER TABLE ib_port_samples DROP COLUMN {column}")
    conn.execute("DELETE FROM schema_migrations WHERE version = 13")
    conn.execute(
        "INSERT INTO ib_port_samples (ts_s, node, device, port, link_downed) VALUES (1, 'node0', 'mlx5_0', 1, 2)"
    )
    conn.close()
    with Store(path) as store:
        row = store.query("SELECT * FROM ib_port_samples")[0]
        assert row["link_downed"] == 2 and all(row[c] is None for c in NEW_COLUMNS)
        assert store.scalar("SELECT max(version) FROM schema_migrations") >= 13
        stored = [r["column_name"] for r in store.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'ib_port_samples' ORDER BY ordinal_position"
        )]  # fmt: skip
        assert stored == list(columns("ib_port_samples"))
