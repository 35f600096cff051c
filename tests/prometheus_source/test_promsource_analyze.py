"""Issue 13 item 4, must-show: `aiops analyze --prometheus` over a real Prometheus (and a real VictoriaMetrics)
holding a faulted public scenario's dcgm-exporter and node_exporter series gives the same top hypothesis as
the store-based analysis of that run. The series reach the engine through its own bulk paths (promtool's TSDB
backfill from the twin's OpenMetrics exposition; VictoriaMetrics' Prometheus import), so the run is read at
the sim clock without waiting for real-time scrapes; docs/PROMETHEUS.md says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli.main import main
from tests.promsource_helpers import prometheus_with, simulated, victoria_metrics_with

# Faulted public scenarios across the label families the dcgm-exporter/node_exporter series carry, one each, the
# smallest clusters that show it (each case simulates a run, backfills it and starts a server: suite time).
PROMETHEUS_SCENARIOS = (
    "thermal-node-small",  # thermal_throttle: clocks-event reasons, temperature
    "from-start-nic-link-flap",  # nic_link_flap from the first sample: node_network_carrier_changes_total, _up
    "ecc-small-node3",  # gpu_ecc_error: DCGM_FI_DEV_XID_ERRORS 48, ECC DBE
    "nvlink-small-node0",  # nvlink_degraded: NVLink CRC flit errors
    "from-start-pcie-degraded",  # pcie_degraded from the first sample: PCIe replay counter
    "power-cap-node-small",  # power_cap_misconfig: DCGM_FI_DEV_POWER_MGMT_LIMIT
    "power-brake-node5",  # power_brake: clocks-event reasons
    "off-bus-node4",  # gpu_fell_off_bus: Xid 79
    "app-error-small-node1",  # application_error: Xid 13/43
)
VICTORIA_SCENARIOS = ("thermal-node-small", "from-start-nic-link-flap", "ecc-small-node3")
# Each run ends this long after its fault starts: its baseline before the fault and the fault's first 90 s (which
# the store-based analysis already names right) go through the servers, not the rest of the scenario's 400-600 s
# (half of each case's CPU: simulating, backfilling and querying scale with the run's length).
AFTER_FAULT_S = 90.0


def analyze_json(
    capsys: pytest.CaptureFixture[str], url: str, start_s: float, end_s: float
) -> dict[str, object]:
    code = main(
        ["analyze", "--prometheus", url, "--start", f"{start_s:.0f}", "--end", f"{end_s:.0f}", "--json"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    answer: dict[str, object] = json.loads(out)
    return answer


def top_of_json(answer: dict[str, object]) -> tuple[str, str] | None:
    hypotheses = answer["hypotheses"]
    assert isinstance(hypotheses, list)
    return (hypotheses[0]["root_cause"], hypotheses[0]["component"]) if hypotheses else None


@pytest.mark.parametrize("scenario", PROMETHEUS_SCENARIOS)
def test_prometheus_source_matches_store_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, scenario: str
) -> None:
    """Each scenario through a real Prometheus; the VICTORIA_SCENARIOS also through a real VictoriaMetrics, from
    the same simulated run (one test: the run is simulated and analysed once for both servers)."""
    monkeypatch.setenv("AIOPS_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    db, start_s, end_s, expected = simulated(tmp_path, scenario, AFTER_FAULT_S)
    assert expected is not None and expected[0] != "healthy"
    with prometheus_with(tmp_path, db) as url:
        answer = analyze_json(capsys, url, start_s, end_s)
    assert top_of_json(answer) == expected
    source = answer["source"]
    assert isinstance(source, dict) and source["step_s"] == 1.0 and source["bytes_fetched"] > 0
    if scenario in VICTORIA_SCENARIOS:
        with victoria_metrics_with(tmp_path, db) as url:
            answer = analyze_json(capsys, url, start_s, end_s)
        assert top_of_json(answer) == expected, "victoria-metrics"


def test_the_victoria_metrics_scenarios_are_prometheus_scenarios() -> None:
    """Each VictoriaMetrics case rides on its Prometheus case's run."""
    assert set(VICTORIA_SCENARIOS) <= set(PROMETHEUS_SCENARIOS)
