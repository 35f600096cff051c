"""ib_port_samples from /sys/class/infiniband: state, rate, counters/* and hw_counters/*, NULL where a counter
file is absent; a host without InfiniBand says so once."""

from __future__ import annotations

from pathlib import Path

from aiops.store import Store
from collectors.infiniband import InfinibandCollector, rate_gbps, state_name
from tests.host_helpers import write

COUNTERS = {
    "symbol_error": 3,
    "link_downed": 1,
    "link_error_recovery": 2,
    "port_rcv_errors": 0,
    "port_xmit_discards": 7,
    "port_xmit_wait": 123456,
    "port_rcv_data": 4000000000,
    "port_xmit_data": 5000000000,
}
HW_COUNTERS = {
    "np_cnp_sent": 11,
    "rp_cnp_handled": 12,
    "np_ecn_marked_roce_packets": 13,
    "out_of_sequence": 14,
    "local_ack_timeout_err": 15,  # m013
    "req_transport_retries_exceeded": 16,
}


def _tree(root: Path) -> None:
    port = "sys/class/infiniband/mlx5_0/ports/1"
    write(
        root,
        {
            f"{port}/state": "4: ACTIVE",
            f"{port}/phys_state": "5: LinkUp",
            f"{port}/rate": "400 Gb/sec (4X NDR)",
        },
    )
    write(root, {f"{port}/counters/{name}": value for name, value in COUNTERS.items()})
    write(root, {f"{port}/hw_counters/{name}": value for name, value in HW_COUNTERS.items()})
    other = "sys/class/infiniband/mlx5_1/ports/1"  # an older driver: counters only, no phys_state
    write(
        root,
        {
            f"{other}/state": "1: DOWN",
            f"{other}/rate": "10 Gb/sec (4X SDR)",
            f"{other}/counters/symbol_error": 0,
        },
    )


def test_parsers() -> None:
    assert state_name("4: ACTIVE") == "ACTIVE" and state_name("DOWN") == "DOWN" and state_name(None) is None
    assert rate_gbps("400 Gb/sec (4X NDR)") == 400.0 and rate_gbps("2.5 Gb/sec (1X SDR)") == 2.5
    assert rate_gbps("weird") is None


def test_ports_land_with_counters_and_nulls(tmp_path: Path, store: Store) -> None:
    _tree(tmp_path)
    tables = InfinibandCollector("node1", tmp_path, nics={"mlx5_0": "node1/nic0"}).collect(7.0)
    assert set(tables) == {"ib_port_samples"}
    store.ingest_many(tables)
    rows = {r["device"]: r for r in store.query("SELECT * FROM ib_port_samples")}
    first = rows["mlx5_0"]
    assert (first["port"], first["nic"], first["state"], first["phys_state"], first["rate_gbps"]) == (
        1,
        "node1/nic0",
        "ACTIVE",
        "LinkUp",
        400.0,
    )
    assert {name: first[name] for name in COUNTERS} == COUNTERS
    assert {name: first[name] for name in HW_COUNTERS} == HW_COUNTERS
    second = rows["mlx5_1"]
    assert (second["nic"], second["state"], second["phys_state"], second["symbol_error"]) == (
        None,
        "DOWN",
        None,
        0,
    )
    assert all(second[name] is None for name in [*list(COUNTERS)[1:], *HW_COUNTERS])


def test_missing_state_is_a_row(tmp_path: Path) -> None:
    _tree(tmp_path)
    (tmp_path / "sys/class/infiniband/mlx5_1/ports/1/state").unlink()
    tables = InfinibandCollector("node1", tmp_path).collect(1.0)
    (error,) = tables["collector_errors"].to_pylist()
    assert (error["error"], error["component"]) == ("missing", "node1")
    assert tables["ib_port_samples"].num_rows == 2


def test_no_infiniband_is_reported_once(tmp_path: Path) -> None:
    collector = InfinibandCollector("node0", tmp_path)
    (status,) = collector.collect(1.0)["collector_errors"].to_pylist()
    assert (status["error"], status["collector"]) == ("unavailable", "infiniband")
    assert "InfiniBand unavailable" in status["detail"]
    assert collector.collect(2.0) == {} and collector.collect(3.0) == {}
