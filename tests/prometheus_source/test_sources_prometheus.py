"""aiops.sources without servers: the client's chunking and errors against a loopback stub, host -> node
mapping, the exposition's names and labels, the CLI's argument errors."""

from __future__ import annotations

import io
import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from aiops.cli.main import main
from aiops.errors import SourceError
from aiops.sources.exposition import NicTotals, render_snapshot
from aiops.sources.mapping import HostIdentity, assign_nodes, host_of
from aiops.sources.prometheus import MAX_POINTS, SAMPLES_PER_REQUEST, PrometheusClient


class Stub(BaseHTTPRequestHandler):
    answers: ClassVar[list[tuple[int, bytes]]] = []
    seen: ClassVar[list[dict[str, str]]] = []
    auth: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        type(self).seen.append(query)
        type(self).auth.append(self.headers.get("Authorization"))
        status, body = type(self).answers.pop(0) if type(self).answers else (200, _matrix())
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def _matrix() -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()


@pytest.fixture
def stub() -> Iterator[str]:
    Stub.answers, Stub.seen, Stub.auth = [], [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_query_range_is_chunked_without_overlap(stub: str) -> None:
    client = PrometheusClient(stub, token="s3cret")
    chunks = list(client.query_range("up", 0.0, 25_000.0, 1.0))
    assert len(chunks) == 4
    ranges = [(float(q["start"]), float(q["end"])) for q in Stub.seen]
    assert ranges == [(0.0, 99.0), (100.0, 11_099.0), (11_100.0, 22_099.0), (22_100.0, 25_000.0)]
    assert all(end - start + 1 <= MAX_POINTS for start, end in ranges)
    assert Stub.auth == ["Bearer s3cret"] * 4


def test_chunks_shrink_as_series_multiply(stub: str) -> None:
    many = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {}, "values": []}] * 500},
    }
    # after the first answer: 100,000 samples / 500 series = 200 points a request
    points = SAMPLES_PER_REQUEST // 500
    assert points == 200
    Stub.answers = [(200, json.dumps(many).encode())] * 7
    list(PrometheusClient(stub).query_range("up", 0.0, 1_100.0, 1.0))
    ranges = [(float(q["start"]), float(q["end"])) for q in Stub.seen]
    assert ranges == [
        (0.0, 99.0),
        (100.0, 299.0),
        (300.0, 499.0),
        (500.0, 699.0),
        (700.0, 899.0),
        (900.0, 1_099.0),
        (1_100.0, 1_100.0),
    ]
    Stub.seen.clear()
    Stub.answers = [(200, json.dumps(many).encode())] * 5
    list(PrometheusClient(stub).query_range("up", 0.0, 999.0, 1.0, series_hint=500))
    assert [(float(q["start"]), float(q["end"])) for q in Stub.seen] == [
        (float(a), float(a + points - 1)) for a in range(0, 1_000, points)
    ]


def test_the_scrape_interval_is_probed_within_the_selector(stub: str) -> None:
    """A server shared by several clusters: the step is the selected cluster's scrape interval, probed on its own
    temperatures (`--selector`), not on the first series of whichever cluster the server lists first."""
    raw = [{"metric": {"cluster": "a"}, "values": [[0, "40"], [15, "41"], [30, "41"]]}]
    Stub.answers = [
        (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": raw}}).encode())
    ]
    assert PrometheusClient(stub).scrape_interval_s(30.0, selector='cluster="a"') == 15.0
    assert Stub.seen[-1]["query"] == 'DCGM_FI_DEV_GPU_TEMP{cluster="a"}[300s]'


def test_http_error_names_url_status_and_escaped_body(stub: str) -> None:
    Stub.answers = [(503, b"\x1b[31mdown\nfor maintenance")]
    with pytest.raises(SourceError) as caught:
        list(PrometheusClient(stub).query_range("up", 0.0, 10.0, 1.0))
    message = str(caught.value)
    assert stub in message and "HTTP 503" in message and "\\x1b[31mdown\\nfor" in message
    assert "\x1b" not in message and "\n" not in message and caught.value.exit_code == 3


def test_error_status_in_json_and_unreachable(stub: str) -> None:
    Stub.answers = [(200, b'{"status":"error","error":"bad query"}')]
    with pytest.raises(SourceError, match="bad query"):
        PrometheusClient(stub).get("/api/v1/query", {"query": "("})
    with pytest.raises(SourceError, match="no answer"):
        PrometheusClient("http://127.0.0.1:9", timeout_s=2).get("/api/v1/query", {"query": "up"})


def test_hostile_labels_never_become_component_names() -> None:
    from aiops.sources.mapping import Staging
    from aiops.store import Store

    store = Store(":memory:")
    staging = Staging(store)
    hostile = [
        {"metric": {"gpu": "\u00b2", "Hostname": "h"}, "values": [[1, "1"]]},
        {"metric": {"gpu": "1", "Hostname": "\x1b[2J../node9"}, "values": [[1, "70"]]},
    ]
    assert staging.add("DCGM_FI_DEV_GPU_TEMP", hostile) == 1
    staging.finish({})
    assert [r["component"] for r in store.query("SELECT component FROM topology WHERE kind = 'gpu'")] == [
        "node0/gpu1"
    ]


def test_a_real_host_keeps_its_name_in_the_topology() -> None:
    from aiops.sources.mapping import Staging
    from aiops.store import Store

    store = Store(":memory:")
    staging = Staging(store)
    series = [
        {"metric": {"gpu": "3", "Hostname": "GPU-A100-017.dc1.example"}, "values": [[1, "70"]]},
        {"metric": {"gpu": "0", "Hostname": "gpu-a100-018"}, "values": [[1, "65"]]},
    ]
    assert staging.add("DCGM_FI_DEV_GPU_TEMP", series) == 2
    staging.finish({})
    rows = store.query("SELECT component, kind, parent, idx FROM topology ORDER BY kind, component")
    got = {(r["component"], r["kind"], r["parent"], r["idx"]) for r in rows}
    assert {
        ("gpu-a100-017", "node", "rack0", 0),
        ("gpu-a100-018", "node", "rack0", 1),
        ("gpu-a100-017/gpu3", "gpu", "gpu-a100-017", 3),
        ("gpu-a100-018/gpu0", "gpu", "gpu-a100-018", 0),
        ("rack0", "rack", "fleet", 0),
    } <= got
    temps = store.query("SELECT gpu, temp_c FROM gpu_samples ORDER BY gpu")
    assert [(r["gpu"], r["temp_c"]) for r in temps] == [
        ("gpu-a100-017/gpu3", 70.0),
        ("gpu-a100-018/gpu0", 65.0),
    ]


def test_hosts_map_by_config_then_their_own_name_then_order() -> None:
    configured = {"gpu-a-17": HostIdentity("node17", "rack2")}
    got = assign_nodes(["GPU-B.dc1.example", "gpu-a-17", "gpu-a", "10.0.0.7", "node17"], configured)
    assert got == {
        "gpu-a-17": HostIdentity("node17", "rack2"),  # [node.hosts] first
        "gpu-a": HostIdentity("gpu-a", "rack0"),  # a real host keeps its name
        "GPU-B.dc1.example": HostIdentity("gpu-b", "rack0"),  # its first label, lowercased (as its agent)
        "10.0.0.7": HostIdentity("node0", "rack0"),  # an address names no host: the order of appearance
        "node17": HostIdentity("node1", "rack0"),  # its name is taken by a configured host
    }
    assert assign_nodes(["node3", "other"], {}) == {
        "node3": HostIdentity("node3", "rack0"),
        "other": HostIdentity("other", "rack0"),
    }
    assert host_of({"Hostname": "h1", "instance": "x:9400"}) == "h1"
    assert host_of({"instance": "h2:9100"}) == "h2"
    assert host_of({"instance": "[fe80::1]:9100"}) == "fe80::1"
    assert host_of({"job": "x"}) is None


def test_snapshot_has_dcgm_exporter_names_and_labels() -> None:
    row = {"node": "node1", "uuid": "GPU-1", "temp_c": 71.0, "clocks_event_reasons": 0x40, "ecc_dbe_total": 2}
    text = render_snapshot(
        {"node1/gpu3": row}, {"node1/gpu3": 48}, {"node1/nic0": NicTotals(carrier_changes=4)}
    )
    labels = (
        '{gpu="3",UUID="GPU-1",pci_bus_id="00000000:48:00.0",device="nvidia3",'
        'modelName="NVIDIA H100 80GB HBM3",Hostname="node1",DCGM_FI_DRIVER_VERSION="550.54.15"}'
    )
    assert f"DCGM_FI_DEV_GPU_TEMP{labels} 71\n" in text
    assert f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{labels} 64\n" in text
    assert f"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{labels} 64\n" in text
    assert f"DCGM_FI_DEV_XID_ERRORS{labels} 48\n" in text
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n" in text
    assert 'node_network_carrier_changes_total{device="eth0",instance="node1:9100",job="node"} 4\n' in text


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["analyze"], "--db PATH, or --prometheus URL"),
        (["analyze", "--prometheus", "http://127.0.0.1:9", "--since", "2 hours"], "not a duration"),
        (["analyze", "--prometheus", "http://127.0.0.1:9", "--start", "2026-01-01T00:00:00"], "no time zone"),
        (["analyze", "--prometheus", "http://127.0.0.1:9", "--start", "20", "--end", "10"], "range is empty"),
    ],
)
def test_cli_argument_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    assert main(argv) == 2
    assert needle in capsys.readouterr().err


def _matrices(text: str) -> dict[str, list[dict[str, Any]]]:
    """Prometheus text with millisecond timestamps -> {metric: query_range's matrix}."""
    series: dict[tuple[str, str], dict[str, Any]] = {}
    for line in text.splitlines():
        head, value, stamp_ms = line.rsplit(" ", 2)
        name, _, labels = head.partition("{")
        key = (name, labels)
        if key not in series:
            pairs = re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)
            series[key] = {"metric": {"__name__": name, **dict(pairs)}, "values": []}
        series[key]["values"].append([int(stamp_ms) / 1000, value])
    out: dict[str, list[dict[str, Any]]] = {}
    for (name, _), found in series.items():
        out.setdefault(name, []).append(found)
    return out


def test_history_read_back_through_the_mapping_gives_the_same_top(tmp_path: Path) -> None:
    """Without a server: the twin's history, parsed as query_range would answer it, mapped and analysed."""
    from aiops.pipeline import analyze_store
    from aiops.runtime.analysis import simulate_into
    from aiops.scenarios import load_scenario
    from aiops.sources.exposition import write_history
    from aiops.sources.mapping import Staging
    from aiops.store import Store

    scenario = Path(__file__).resolve().parents[2] / "evals" / "scenarios" / "ecc-small-node3.yaml"
    with Store(tmp_path / "sim.duckdb") as simulated:
        simulate_into(simulated, load_scenario(str(scenario)))
        expected = analyze_store(simulated).diagnoses[0].hypotheses[0]
        text = io.StringIO()
        write_history(simulated, text, openmetrics=False)
    with Store(tmp_path / "read.duckdb") as store:
        staging = Staging(store)
        for name, matrix in _matrices(text.getvalue()).items():
            staging.add(name, matrix)
        rows = staging.finish({})
        assert rows["gpu_events"] >= 1 and rows["nic_samples"] > 0
        assert not store.query(
            "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'prom_%'"
        )
        got = analyze_store(store).diagnoses[0].hypotheses[0]
    assert (
        (got.root_cause, got.component)
        == (expected.root_cause, expected.component)
        == (
            "gpu_ecc_error",
            "node3/gpu0",
        )
    )


def test_a_failing_source_exits_3_and_leaves_no_half_filled_db(
    stub: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    Stub.answers = [(503, b"overloaded")]
    keep = tmp_path / "keep.duckdb"
    assert main(["analyze", "--prometheus", stub, "--db", str(keep), "--since", "1h"]) == 3
    err = capsys.readouterr().err
    assert "HTTP 503" in err and "overloaded" in err and "Traceback" not in err
    assert not keep.exists()


def test_hostile_labels_are_not_copied_into_every_staged_row() -> None:
    """Issue 36, low: labels are staged once per sample; a megabyte `Hostname` (or `device`, or `UUID`) was
    copied into every row, and a few thousand such series ran DuckDB out of memory. Now a label too long to be
    a host, interface or UUID is no such thing: the series is skipped (or its UUID dropped)."""
    from aiops.sources.mapping import Staging
    from aiops.store import Store

    store = Store(":memory:")
    staging = Staging(store)
    huge = "h" * (64 * 1024)
    hostile = [
        {"metric": {"gpu": "0", "Hostname": huge}, "values": [[t, "70"] for t in range(50)]},
        {"metric": {"gpu": "1", "Hostname": "gpu-a", "UUID": "GPU-" + "u" * 5000}, "values": [[1, "71"]]},
    ]
    assert staging.add("DCGM_FI_DEV_GPU_TEMP", hostile) == 1
    assert (
        staging.add(
            "node_network_up", [{"metric": {"instance": "gpu-a:9100", "device": huge}, "values": [[1, "1"]]}]
        )
        == 0
    )
    longest = store.scalar("SELECT max(length(host)) + coalesce(max(length(uuid)), 0) FROM prom_gpu")
    assert longest < 300
