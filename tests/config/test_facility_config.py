"""`[facility]` in the config file: defaults that name real exporter series, overrides, and errors naming the
file, the key and the allowed values; the facility renderers' formats (OpenMetrics seconds, Prometheus text
milliseconds, one scrape per step, the snapshot's newest values); what fetch_facility does with NaN readings
and series no rack claims (a loopback stub answering query_range)."""

from __future__ import annotations

import io
import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from aiops.config import Config, FacilityConfig, load_config_file, parse_config
from aiops.config_example import example_toml
from aiops.errors import ConfigError, SourceError
from aiops.sources.facility import (
    fetch_facility,
    rack_of,
    render_facility_history,
    render_facility_snapshot,
    selector,
)
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "aiops.toml"
    path.write_text(text)
    return path


def test_the_defaults_name_the_exporters_series() -> None:
    config = Config().facility
    assert selector(config.inlet_temp_c) == '{__name__="ipmi_temperature_celsius",name="Inlet Temp"}'
    assert (config.power_kw.metric, config.power_kw.aggregate, config.power_kw.scale) == (
        "ipmi_dcmi_power_consumption_watts",
        "sum",
        0.001,
    )
    assert config.coolant_supply_temp_c.metric == "cpqRackThermalControllerWaterTempSupply"
    assert "[facility.inlet_temp_c]" in example_toml() and '# "10.0.4.17:623" = "rack2"' in example_toml()


def test_a_file_overrides_series_and_maps_instances(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        '[facility]\nrack_label = "rack_name"\ndcim = "https://dcim.example/caps"\n'
        '[facility.racks]\n"10.0.0.7:623" = "rack3"\n'
        '[facility.power_kw]\nmetric = "redfish_chassis_power_consumed_watts"\n'
        'match = { chassis_id = "1" }\naggregate = "sum"\nscale = 0.001\n',
    )
    config = load_config_file(path).facility
    assert selector(config.power_kw) == '{__name__="redfish_chassis_power_consumed_watts",chassis_id="1"}'
    assert config.inlet_temp_c == FacilityConfig().inlet_temp_c  # the rest keeps its defaults
    assert rack_of({"rack_name": "rack1"}, config) == "rack1"
    assert (
        rack_of({"rack": "rack1", "instance": "10.0.0.7:623"}, config) == "rack3"
    )  # `rack` is not the label
    assert rack_of({"rack_name": "row-b", "instance": "10.9.9.9:623"}, config) == "row-b"  # any rack name
    assert rack_of({"rack_name": "Row B", "instance": "10.9.9.9:623"}, config) is None  # no RFC 1123 label


@pytest.mark.parametrize(
    ("text", "key", "allowed"),
    [
        ('[facility]\nrack = "x"\n', "facility.rack", "rack_label"),
        ('[facility.power_kw]\nmetric = "m"\nunit = "W"\n', "facility.power_kw.unit", "scale"),
        (
            '[facility.inlet_temp_c]\nmetric = "m"\naggregate = "mean"\n',
            "facility.inlet_temp_c.aggregate",
            "avg",
        ),
    ],
)
def test_an_unknown_key_or_value_names_file_key_and_allowed(
    tmp_path: Path, text: str, key: str, allowed: str
) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    message = str(caught.value)
    assert str(path) in message and key in message and allowed in message, message


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ('[facility.power_kw]\nmetric = "ipmi power"\n', "facility.power_kw.metric", "metric name"),
        ('[facility.power_kw]\nmetric = "m"\nscale = 0\n', "facility.power_kw.scale", "greater than 0"),
        (
            '[facility.power_kw]\nmetric = "m"\nmatch = { "bad-label" = "x" }\n',
            "facility.power_kw.match",
            "label",
        ),
        ('[facility]\nrack_label = "__name__"\n', "facility.rack_label", "label name"),
        ('[facility.racks]\n"10.0.0.7:623" = "Row 3"\n', "facility.racks", "RFC 1123 label"),
        ('[facility]\ndcim = "ftp://dcim/caps"\n', "facility.dcim", "http"),
        ("[facility.power_kw]\nscale = 0.001\n", "facility.power_kw.metric", "required"),
        (
            '[facility.outlet_temp_c]\nmetric = "ipmi_temperature_celsius"\nmatch = { name = "Inlet Temp" }\n',
            "facility",
            "same series as inlet_temp_c",
        ),
    ],
)
def test_a_bad_value_names_file_key_and_problem(tmp_path: Path, text: str, key: str, problem: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    message = str(caught.value)
    assert str(path) in message and key in message and problem in message, message


# -- renderers ----------------------------------------------------------------------------------------------
def _rows() -> list[dict[str, Any]]:
    rows = []
    for t in range(31):
        for rack in ("rack0", "rack1"):
            rows.append(
                {
                    "ts_s": 1000.0 + t,
                    "rack": rack,
                    "inlet_temp_c": 25.0 + t / 10,
                    "outlet_temp_c": 30.0,
                    "coolant_supply_temp_c": 24.0,
                    "coolant_flow_lpm": None if rack == "rack1" else 200.0,
                    "power_kw": 27.83,
                    "power_cap_kw": None,
                }
            )
    return rows


def test_history_is_one_scrape_per_step_in_either_format() -> None:
    om, text = io.StringIO(), io.StringIO()
    written = render_facility_history(_rows(), om, step_s=15, openmetrics=True)
    assert render_facility_history(_rows(), text, step_s=15, openmetrics=False) == written
    # scrapes at 1000, 1015, 1030; five columns for rack0, four for rack1 (no flow reading)
    assert written == 3 * 5 + 3 * 4
    lines = om.getvalue().splitlines()
    assert lines[-1] == "# EOF"
    assert 'ipmi_dcmi_power_consumption_watts{instance="rack0-power",rack="rack0"} 27830 1015' in lines
    assert 'ipmi_temperature_celsius{name="Inlet Temp",instance="rack1-inlet",rack="rack1"} 28 1030' in lines
    assert 'ipmi_temperature_celsius{name="Inlet Temp",instance="rack1-inlet",rack="rack1"} 28 1030000' in (
        text.getvalue().splitlines()
    )
    assert "# EOF" not in text.getvalue()
    families = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(families) == len(set(families)) == 5  # each family once, its samples together


def test_the_snapshot_holds_each_racks_newest_values() -> None:
    config = FacilityConfig(racks={"bmc-a:623": "rack0"})
    text = render_facility_snapshot(_rows(), config)
    assert 'ipmi_temperature_celsius{name="Inlet Temp",instance="bmc-a:623"} 28\n' in text
    assert 'ipmi_temperature_celsius{name="Inlet Temp",instance="rack1-inlet",rack="rack1"} 28\n' in text
    flows = [
        line for line in text.splitlines() if line.startswith("redfish_cdu_coolant_flow_liters_per_minute{")
    ]
    assert flows == ['redfish_cdu_coolant_flow_liters_per_minute{instance="bmc-a:623"} 200']  # none in rack1


# -- fetch against a stub query_range -------------------------------------------------------------------------
class Matrix(BaseHTTPRequestHandler):
    result: ClassVar[list[dict[str, Any]]] = []
    queries: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        type(self).queries.append(query["query"])
        wanted = query["query"].split('"')[1]
        result = [r for r in type(self).result if r["metric"]["__name__"] == wanted]
        body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}})
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def matrix() -> Iterator[str]:
    Matrix.result, Matrix.queries = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Matrix)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _series(name: str, labels: dict[str, str], values: list[tuple[float, str]]) -> dict[str, Any]:
    return {"metric": {"__name__": name, **labels}, "values": [[t, v] for t, v in values]}


def test_fetch_combines_a_racks_bmcs_skips_nan_and_reports_the_unclaimed(matrix: str, tmp_path: Path) -> None:
    power = "ipmi_dcmi_power_consumption_watts"
    inlet = "ipmi_temperature_celsius"
    Matrix.result = [
        _series(power, {"instance": "n0:623", "rack": "rack0"}, [(1015, "3000"), (1030, "3500")]),
        _series(power, {"instance": "n1:623", "rack": "rack0"}, [(1015, "4000"), (1030, "NaN")]),
        _series(power, {"instance": "n9:623"}, [(1015, "9999")]),  # no rack: reported, not guessed
        _series(
            inlet, {"instance": "n0:623", "rack": "rack0", "name": "Inlet Temp"}, [(1015, "24"), (1030, "25")]
        ),
        _series(
            inlet,
            {"instance": "n1:623", "rack": "rack0", "name": "Inlet Temp"},
            [(1015, "26"), (1030, "+Inf")],
        ),
    ]
    config = parse_config({"facility": {"racks": {"n7:623": "rack2"}}}, "test").facility
    with Store(tmp_path / "f.db") as store:
        report = fetch_facility(
            store, PrometheusClient(matrix), start_s=1010, end_s=1030, step_s=15, config=config
        )
        rows = store.query(
            "SELECT ts_s, rack, inlet_temp_c, power_kw, coolant_flow_lpm FROM rack_samples ORDER BY ts_s"
        )
    assert rows == [
        {"ts_s": 1015.0, "rack": "rack0", "inlet_temp_c": 25.0, "power_kw": 7.0, "coolant_flow_lpm": None},
        {"ts_s": 1030.0, "rack": "rack0", "inlet_temp_c": 25.0, "power_kw": 3.5, "coolant_flow_lpm": None},
    ]
    assert report.columns == ["inlet_temp_c", "power_kw"] and report.racks == ["rack0"]
    assert report.unmapped == ['{__name__="ipmi_dcmi_power_consumption_watts",instance="n9:623"}']
    assert '{__name__="ipmi_temperature_celsius",name="Inlet Temp"}' in Matrix.queries


def test_fetch_refuses_a_backwards_range(matrix: str, tmp_path: Path) -> None:
    with Store(tmp_path / "f.db") as store, pytest.raises(SourceError, match="empty range"):
        fetch_facility(store, PrometheusClient(matrix), start_s=20, end_s=10, step_s=15)
