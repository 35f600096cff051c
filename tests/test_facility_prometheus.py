"""Rack sensors through a REAL Prometheus (issue 24, item 2): the twin's rack_samples rendered as the facility
exporters' series every 15 s, backfilled with promtool, read back with `fetch_facility` into a fresh workspace:
every row the scrape saw comes back within rounding (W -> kW included), the fault is visible in what came back,
a range fetched again writes nothing new; a facility cap's DCIM document served over loopback HTTP lands in the
fleet's dcim_signals. Both rack mappings: the `rack` label, and `[facility.racks]` instance -> rack. With the
node exporters' series beside them at a 15 s scrape, the analyst names rack cooling and the facility cap."""

from __future__ import annotations

import io
import json
import subprocess
import threading
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from aiops.config import FacilityConfig
from aiops.control.dcim_signals import dcim_caps_kw, signals_in_force
from aiops.control.dcim_source import dcim_document, read_dcim, record_changes
from aiops.pipeline import analyze_store
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import load_scenario
from aiops.sources.exposition import write_history
from aiops.sources.facility import (
    COLUMNS,
    facility_rows,
    fetch_facility,
    render_facility_history,
    scrapes,
)
from aiops.sources.mapping import HostIdentity
from aiops.sources.prometheus import PrometheusClient, fetch_into
from aiops.store import Store
from tests.promsource_helpers import SCENARIOS, prometheus_holding, stop, top_of
from tests.service_helpers import free_port, get, require_binary, wait_for

STEP_S = 15.0


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each scenario simulated once for the module (the twin is deterministic: a second run of the same scenario
    stores the same rows), read by the tests that need it."""
    out: dict[str, Path] = {}
    for scenario in ("rack-cooling-rack1", "facility-cap-rack"):
        out[scenario] = tmp_path_factory.mktemp(scenario) / "twin.duckdb"
        with Store(out[scenario]) as store:
            simulate_into(store, load_scenario(str(SCENARIOS / f"{scenario}.yaml")))
    return out


def _twin(db: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The twin's rack_samples rows and the DCIM document in force at its end."""
    with Store(db, read_only=True) as store:
        rows = facility_rows(store)
        document = dcim_document(store, float(rows[-1]["ts_s"]))
    return rows, document


def _render(tmp_path: Path, rows: list[dict[str, Any]], config: FacilityConfig) -> Path:
    history = tmp_path / "facility.om"
    with history.open("w") as out:
        assert render_facility_history(rows, out, step_s=STEP_S, openmetrics=True, config=config) > 0
    return history


def _expected(seen: Sequence[Mapping[str, Any]], rack: str, ts_s: float) -> Mapping[str, Any]:
    """The newest scrape of `rack` at or before `ts_s` (what Prometheus answers at an evaluation time)."""
    before = [r for r in seen if r["rack"] == rack and float(r["ts_s"]) <= ts_s + 1e-6]
    assert before, (rack, ts_s)
    return before[-1]


def _assert_matches(fetched: list[dict[str, Any]], seen: Sequence[Mapping[str, Any]]) -> None:
    assert fetched
    for row in fetched:
        want = _expected(seen, str(row["rack"]), float(row["ts_s"]))
        for column in COLUMNS:
            assert row[column] is not None, (row, column)
            assert abs(float(row[column]) - float(want[column])) < 1e-6, (row, want, column)
        assert row["power_cap_kw"] is None  # no rack sensor knows the facility's cap: the DCIM input does


def test_rack_cooling_round_trips_through_prometheus(twins: dict[str, Path], tmp_path: Path) -> None:
    rows, _ = _twin(twins["rack-cooling-rack1"])
    config = FacilityConfig()
    seen, (start_s, end_s) = scrapes(rows, STEP_S), (float(rows[0]["ts_s"]), float(rows[-1]["ts_s"]))
    with (
        prometheus_holding(tmp_path, _render(tmp_path, rows, config)) as url,
        Store(tmp_path / "f.db") as fleet,
    ):
        client = PrometheusClient(url)
        middle_s = start_s + (end_s - start_s) / 2
        first = fetch_facility(fleet, client, start_s=start_s, end_s=middle_s, step_s=STEP_S, config=config)
        report = fetch_facility(fleet, client, start_s=start_s, end_s=end_s, step_s=STEP_S, config=config)
        again = fetch_facility(fleet, client, start_s=start_s, end_s=end_s, step_s=STEP_S, config=config)
        fetched = fleet.query("SELECT * FROM rack_samples ORDER BY ts_s, rack")
    assert report.racks == ["rack0", "rack1"] and report.columns == list(COLUMNS) and not report.unmapped
    grid = int((end_s - report.start_s) // STEP_S)  # grid points after the first scrape
    assert len(fetched) == 2 * grid == first.rows + report.rows, (len(fetched), grid, first.rows, report.rows)
    assert again.rows == 0 and again.samples == report.samples  # the same range again: nothing new
    _assert_matches(fetched, seen)
    # the fault as the fleet sees it: rack1's coolant flow falls and its supply warms; rack0's does not
    fault_s = start_s + 180 + 120  # its ramp is over
    before = {r["rack"]: r for r in fetched if float(r["ts_s"]) <= start_s + 170}
    after = {r["rack"]: r for r in fetched if float(r["ts_s"]) >= fault_s}
    assert after["rack1"]["coolant_flow_lpm"] < 0.5 * before["rack1"]["coolant_flow_lpm"]
    assert after["rack1"]["coolant_supply_temp_c"] > before["rack1"]["coolant_supply_temp_c"] + 10
    assert after["rack0"]["coolant_flow_lpm"] > 0.9 * before["rack0"]["coolant_flow_lpm"]


class _Dcim(BaseHTTPRequestHandler):
    body: ClassVar[list[bytes]] = [b"{}"]  # what the DCIM serves now (a test changes it)

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(type(self).body[0])

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serving(body: bytes) -> Iterator[str]:
    """A DCIM on a loopback port serving `body` (then whatever `_Dcim.body[0]` is set to)."""
    _Dcim.body[0] = body
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Dcim)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/dcim/caps"
    finally:
        server.shutdown()
        server.server_close()


def test_facility_cap_round_trips_with_instance_mapping_and_the_dcim_document(
    twins: dict[str, Path], tmp_path: Path
) -> None:
    rows, document = _twin(twins["facility-cap-rack"])
    assert document == {"rack0": {"kw": 23.1}}  # the twin's cap in force at the end, as a DCIM serves it
    config = FacilityConfig(
        rack_label="site_rack", racks={"10.0.4.17:9290": "rack0", "10.0.4.18:9290": "rack1"}
    )
    seen, (start_s, end_s) = scrapes(rows, STEP_S), (float(rows[0]["ts_s"]), float(rows[-1]["ts_s"]))
    history = _render(tmp_path, rows, config)
    assert 'instance="10.0.4.17:9290"' in history.read_text() and "site_rack" not in history.read_text()
    with prometheus_holding(tmp_path, history) as url, Store(tmp_path / "f.db") as fleet:
        report = fetch_facility(
            fleet, PrometheusClient(url), start_s=start_s, end_s=end_s, step_s=STEP_S, config=config
        )
        assert report.racks == ["rack0", "rack1"] and not report.unmapped
        fetched = fleet.query("SELECT * FROM rack_samples ORDER BY ts_s, rack")
        _assert_matches(fetched, seen)
        capped = [r for r in fetched if r["rack"] == "rack0" and float(r["ts_s"]) >= start_s + 260]
        assert capped and max(float(r["power_kw"]) for r in capped) <= 23.1 * 1.02
        # the DCIM input: the document served over loopback HTTP, recorded as `aiops dcim watch` would
        with serving(json.dumps(document).encode()) as dcim_url:
            source = f"http:{dcim_url}"
            changes = record_changes(fleet, read_dcim(dcim_url, end_s, report.racks), end_s, source)
            assert changes == ["rack0: cap 23.1 kW"]
            assert record_changes(fleet, read_dcim(dcim_url, end_s + 5), end_s + 5, source) == []  # no change
            assert dcim_caps_kw(fleet, end_s - 10, end_s) == {"rack0": 23.1}
            _Dcim.body[0] = b"{}"  # the DCIM lifts the cap: no longer listed -> cleared
            changes = record_changes(fleet, read_dcim(dcim_url, end_s + 10), end_s + 10, source)
        assert changes == ["rack0: clear (no longer listed)"]
        assert signals_in_force(fleet)["rack0"].kind == "clear"
        assert dcim_caps_kw(fleet, end_s + 10, end_s + 20) == {}


def test_the_prometheus_text_history_round_trips_through_victoria_metrics(
    twins: dict[str, Path], tmp_path: Path
) -> None:
    """The millisecond-timestamp format, imported by a real VictoriaMetrics, reads back the same."""
    rows, _ = _twin(twins["rack-cooling-rack1"])
    text = io.StringIO()
    assert render_facility_history(rows, text, step_s=STEP_S, openmetrics=False) > 0
    seen, (start_s, end_s) = scrapes(rows, STEP_S), (float(rows[0]["ts_s"]), float(rows[-1]["ts_s"]))
    binary = require_binary("victoria-metrics")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "vm.log").open("ab")
    flags = [
        f"-storageDataPath={tmp_path / 'vm'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
    ]
    proc = subprocess.Popen([binary, *flags, "-search.latencyOffset=0s"], stdout=log, stderr=log)
    try:
        wait_for(lambda: get(f"{url}/health", 2.0)[0] == 200, 60, "victoria-metrics to be ready")
        request = urllib.request.Request(
            f"{url}/api/v1/import/prometheus", data=text.getvalue().encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert reply.status == 204, reply.status
        assert get(f"{url}/internal/force_flush", 30.0)[0] == 200
        with Store(tmp_path / "f.db") as fleet:
            report = fetch_facility(fleet, PrometheusClient(url), start_s=start_s, end_s=end_s, step_s=STEP_S)
            fetched = fleet.query("SELECT * FROM rack_samples ORDER BY ts_s, rack")
    finally:
        stop(proc)
        log.close()
    assert report.racks == ["rack0", "rack1"] and report.columns == list(COLUMNS)
    _assert_matches(fetched, seen)


def _every_step(lines: list[str], first_s: float) -> Iterator[str]:
    """The samples of a 1 s history that a scrape every STEP_S from `first_s` takes (no `# EOF`)."""
    for line in lines:
        if not line.startswith("#") and (float(line.rsplit(" ", 1)[1]) - first_s) % STEP_S < 1e-6:
            yield line


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("rack-cooling-rack1", ("rack_cooling_failure", "rack1")),
        ("facility-cap-rack", ("facility_power_cap", "rack0")),
    ],
)
def test_the_analyst_names_them_as_such_from_prometheus_at_a_15_s_step(
    twins: dict[str, Path], tmp_path: Path, scenario: str, expected: tuple[str, str]
) -> None:
    """The node exporters' series and the facility's through one Prometheus at a 15 s step, the DCIM caps read
    over HTTP when the DCIM lists them: the analyst names the rack cooling failure and the facility cap (with
    the node series alone it says thermal_throttle on one node, and power_cap_misconfig on one GPU)."""
    with Store(twins[scenario], read_only=True) as twin:
        start_s = float(twin.scalar("SELECT min(ts_s) FROM gpu_samples"))
        end_s = float(twin.scalar("SELECT max(ts_s) FROM gpu_samples"))
        racks = twin.query("SELECT component, rack FROM topology WHERE kind = 'node'")
        history = tmp_path / "history.om"
        text = io.StringIO()
        write_history(twin, text, openmetrics=True)
        text_lines = text.getvalue().splitlines(keepends=True)
        del text
        rows = facility_rows(twin)
        cap_times = [
            float(t) for (t,) in twin.conn.execute("SELECT DISTINCT ts_s FROM dcim_signals").fetchall()
        ]
        documents = {t: dcim_document(twin, t) for t in cap_times}
    with history.open("w") as out:  # the node exporters as a 15 s scrape saw them, then the facility's
        out.writelines(_every_step(text_lines, start_s))
        render_facility_history(rows, out, step_s=STEP_S, openmetrics=True)
    hosts = {str(r["component"]): HostIdentity(str(r["component"]), str(r["rack"])) for r in racks}
    with prometheus_holding(tmp_path, history) as url, Store(tmp_path / "fleet.duckdb") as fleet:
        client = PrometheusClient(url)
        fetch_into(fleet, client, start_s=start_s, end_s=end_s, step_s=STEP_S, hosts=hosts)
        fetch_facility(fleet, client, start_s=start_s, end_s=end_s, step_s=STEP_S)
        with serving(b"{}") as dcim_url:
            for at_s in cap_times:  # the DCIM's document changes when the twin's cap does
                _Dcim.body[0] = json.dumps(documents[at_s]).encode()
                record_changes(fleet, read_dcim(dcim_url, at_s), at_s, f"http:{dcim_url}")
        assert top_of(analyze_store(fleet)) == expected
