"""Issue 13 item 4: a real Prometheus scrapes `aiops run --sim`'s `/metrics/dcgm` (dcgm-exporter's and
node_exporter's exact names and labels; `promtool check metrics` accepts it), and `aiops analyze --prometheus`
over what it scraped, in real time, names the faulted GPU (thermal_throttle on node1/gpu2 from 40 simulated s, 4 wall
seconds at 10x: Prometheus starts beside the service, its target in a watched file written once the service
listens)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from aiops.cli.main import main
from tests.prometheus_process import prometheus_running
from tests.service_helpers import (
    TINY_SCENARIO,
    get,
    get_json,
    require_binary,
    running_service,
    service_env,
    wait_for,
)

FAULT_S = 10  # wall seconds (scrapes) of the fault in Prometheus before the analyst reads it
SCENARIO = TINY_SCENARIO.replace("start_s: 90,", "start_s: 40,")  # thermal_throttle on node1/gpu2
DCGM_EXPORTER_LINT = {
    "label names should be written in 'snake_case' not 'camelCase'",
    'counter metrics should have "_total" suffix',
    "metric name should not include type 'counter'",
}
DCGM_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}


def _query(port: int, promql: str) -> list[dict[str, dict[str, str]]]:
    body = get_json(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def test_prometheus_scrapes_the_twins_dcgm_exposition_and_the_analyst_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    promtool = require_binary("promtool")
    assert "start_s: 40," in SCENARIO, SCENARIO  # the fault moved earlier (TINY_SCENARIO's is at 90 s)
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(SCENARIO)
    config, targets = tmp_path / "prometheus.yml", tmp_path / "targets.json"
    targets.write_text("[]")
    # honor_labels: one twin stands for every node, so node_exporter's `instance` of each host is kept; the
    # target in a watched file, written once the service listens (Prometheus starts beside it)
    config.write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n"
        f"  - {{job_name: dcgm, metrics_path: /metrics/dcgm, honor_labels: true, "
        f"file_sd_configs: [{{files: ['{targets}']}}]}}\n"
    )
    with (
        prometheus_running(config, tmp_path) as prom_port,
        running_service(tmp_path, tmp_path / "svc.duckdb", "--sim", str(scenario), "--speed", "10") as (
            _,
            port,
        ),
    ):
        targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"]}]))
        status, body = get(f"http://127.0.0.1:{port}/metrics/dcgm")
        assert status == 200
        checked = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
        # It parses; what promtool's linter says is only about dcgm-exporter's own naming, kept on purpose
        # (camelCase UUID/modelName/Hostname labels, counters without `_total`, `..._COUNTER` in a name).
        complaints = {line.split(" ", 1)[1] for line in checked.stderr.decode().splitlines()}
        assert complaints <= DCGM_EXPORTER_LINT and b"DCGM_FI_DEV_GPU_TEMP" in body, checked.stderr
        temps = wait_for(lambda: _query(prom_port, "DCGM_FI_DEV_GPU_TEMP"), 60, "a scrape")
        assert len(temps) == 8 and all(set(r["metric"]) >= DCGM_LABELS for r in temps)
        assert {r["metric"]["Hostname"] for r in temps} == {"node0", "node1"}
        hot = 'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{Hostname="node1",gpu="2"} > 0'
        wait_for(lambda: _query(prom_port, hot), 90, "the fault in the scraped series")
        wait_for(
            lambda: _query(prom_port, f"count_over_time(({hot})[1m:1s]) >= {FAULT_S}"),
            90,
            f"{FAULT_S} s of it",
        )
        carrier = _query(prom_port, "node_network_carrier_changes_total")
        assert {r["metric"]["instance"] for r in carrier} == {"node0:9100", "node1:9100"}
        # the analyst in this process (it only prints): the service's environment, the CLI's exit code and JSON
        env = service_env(tmp_path)
        for name in set(os.environ) - set(env):
            monkeypatch.delenv(name)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        code = main(["analyze", "--prometheus", f"http://127.0.0.1:{prom_port}", "--since", "5m", "--json"])
        out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    answer = json.loads(out)
    top = answer["hypotheses"][0]
    assert top["root_cause"] == "thermal_throttle" and top["component"] == "node1/gpu2", top
    # the step is the scrape interval read from the samples' spacing (their median gap): Prometheus stamps a scrape
    # when it ran, so on a loaded machine the gaps run a few ms long (1.0035 s seen); a default step is 15 s or more
    assert answer["source"]["step_s"] == pytest.approx(1.0, abs=0.05)
