"""Where a real node stands (collectors/placement.py): `[node] rack`/`row` from the config, overridden by the
node's Kubernetes labels read from the API server (its real Node JSON on 127.0.0.1, the official client) where
label keys are configured, written by `aiops run`'s host start into `node_placement` and the topology's rack."""

from __future__ import annotations

from pathlib import Path

from aiops.config import Config
from aiops.service.sources import host_sources, register_topology
from aiops.store import Store
from collectors.placement import placement_of, read_placement
from collectors.workloads.kubernetes import kube_api
from tests.workload_helpers import api_server, node_json

LABELS = {
    "topology.kubernetes.io/zone": "eu-west-1a",
    "topology.kubernetes.io/region": "eu-west-1",
    "example.com/rack": "rack7",
    "example.com/row": "row-c",
}


def _config(tmp_path: Path, api_url: str, rack_label: str = "example.com/rack") -> Config:
    return Config.model_validate(
        {
            "node": {"name": "node3", "rack": "rack0", "row": "row-a"},
            "scheduler": {"node_name": "node3"},  # the API's name of this node (aiops run --hostname)
            "collectors": {
                "root": str(tmp_path),  # an empty host tree: every source reports itself unavailable
                "nvml": {"enabled": False},
                "kmsg": {"enabled": False},
                "workloads": {
                    "kube_api": api_url,
                    "node_rack_label": rack_label,
                    "node_row_label": "example.com/row",
                    "pod_resources_socket": str(tmp_path / "absent.sock"),
                },
            },
        }
    )


def test_the_node_labels_give_rack_row_zone_and_region_at_a_host_start(tmp_path: Path) -> None:
    with api_server([], [node_json("node3", LABELS)]) as api:
        sources = host_sources(_config(tmp_path, api.url))
        store = Store(str(tmp_path / "w.duckdb"))
        try:
            register_topology(store, sources)
            assert store.query("SELECT * FROM node_placement") == [
                {
                    "node": "node3",
                    "rack": "rack7",
                    "row": "row-c",
                    "zone": "eu-west-1a",
                    "region": "eu-west-1",
                    "source": "kubernetes",
                }
            ]
            assert store.query("SELECT rack FROM topology WHERE component = 'node3'") == [{"rack": "rack7"}]
        finally:
            sources.close()
            store.close()
        assert any(r.startswith("/api/v1/nodes/node3") for r in api.requests)


def test_without_labels_or_api_the_config_stands_and_an_unreachable_api_says_why(tmp_path: Path) -> None:
    with api_server([], [node_json("node3", {"topology.kubernetes.io/zone": "z"})]) as api:
        client = kube_api("node3", api.url)
        found = read_placement("node3", "rack0", "row-a", client, "example.com/rack", "example.com/row")
        assert (found.rack, found.row, found.zone, found.source) == ("rack0", "row-a", "z", "config")
        missing = kube_api("node9", api.url)  # the API answers 404 for a node it does not have
        gone = read_placement("node9", "rack0", None, missing, "example.com/rack")
        assert gone.rack == "rack0" and gone.error is not None and "404" in gone.error
    assert placement_of("n", "rack1", "", None) == placement_of("n", "rack1", None, None)
    assert placement_of("n", "rack1", None, {"r": "x" * 500}, "r").rack == "x" * 63  # bounded


def test_a_rack_label_that_is_no_rack_name_leaves_the_configs_rack_and_says_why(tmp_path: Path) -> None:
    for bad in ("Rack_A1", "node4", "fleet"):  # a label is data: no rack name, no rack
        with api_server([], [node_json("node3", {**LABELS, "example.com/rack": bad})]) as api:
            sources = host_sources(_config(tmp_path, api.url))
            sources.close()
        where = sources.placement
        assert where is not None and (where.rack, where.row, where.source) == ("rack0", "row-c", "kubernetes")
        assert where.error is not None and "node label example.com/rack = " in where.error, bad
