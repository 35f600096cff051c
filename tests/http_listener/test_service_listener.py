"""One process, one port: a real `aiops run --sim S --listen 127.0.0.1:P` with `[console] enabled = true` answers
the console's sign-in at `/`, `/metrics` that promtool accepts, `/healthz`, the JSON API and Alertmanager's
webhook (401 without its token, 200 with it) on that one port, and listens on no other. An old config that
still names `[console] listen` alone is refused with a line that says what to write instead."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client import CONTENT_TYPE_LATEST

from aiops.errors import ConfigError
from tests.service_helpers import (
    TINY_SCENARIO,
    aiops_cmd,
    free_port,
    listening_ports,
    require_binary,
    running_service,
    service_env,
)

TOKEN = "alertmanager-token-for-the-listener-test"
ALERT = {
    "version": "4",
    "groupKey": "{}:{}",
    "truncatedAlerts": 0,
    "status": "firing",
    "receiver": "aiops",
    "groupLabels": {},
    "commonLabels": {},
    "commonAnnotations": {},
    "externalURL": "http://am",
    "alerts": [
        {
            "status": "firing",
            "labels": {"alertname": "GpuHot", "Hostname": "node1", "gpu": "2"},
            "annotations": {},
            "startsAt": "2024-01-01T00:00:00Z",
            "endsAt": "0001-01-01T00:00:00Z",
            "generatorURL": "http://prometheus/graph",
            "fingerprint": "2e9c85895f984351",
        }
    ],
}


def test_aiops_run_serves_console_metrics_probes_api_and_webhook_on_one_port(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    scenario, token_file = tmp_path / "tiny.yaml", tmp_path / "am.token"
    scenario.write_text(TINY_SCENARIO)
    token_file.write_text(TOKEN + "\n")
    (tmp_path / "aiops.toml").write_text(
        f'[console]\nenabled = true\n\n[alertmanager_in]\ntoken_file = "{token_file}"\n'
    )
    db = tmp_path / "svc.duckdb"
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "10") as (proc, port):
        assert listening_ports(proc.pid) == {port}  # one listener
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, follow_redirects=False) as web:
            home = web.get("/")
            assert (home.status_code, home.headers["location"]) == (303, "/login")
            login = web.get("/login")
            assert login.status_code == 200 and 'name="csrf_token"' in login.text
            assert "aiops console adduser NAME --role admin" in login.text  # first run: no account yet
            assert "content-security-policy" in login.headers  # the console's own headers

            metrics = web.get("/metrics")
            assert metrics.status_code == 200 and metrics.headers["content-type"] == CONTENT_TYPE_LATEST
            assert metrics.headers["x-content-type-options"] == "nosniff"
            assert "aiops_gpu_temperature_celsius" in metrics.text
            checked = subprocess.run(
                [promtool, "check", "metrics"], input=metrics.content, capture_output=True, timeout=60
            )
            assert checked.returncode == 0, checked.stdout + checked.stderr

            health = web.get("/healthz")
            assert (health.status_code, health.text) == (200, "ok\n")
            # loopback: no token needed; the active maintenance windows come with the incidents, and the list
            # says how many there are, whether it was cut and when it was read (aiops/service/incident_list.py)
            assert web.get("/api/incidents").json().keys() == {
                "incidents",
                "maintenance",
                "total",
                "limit",
                "cut",
                "as_of_ts_s",
                "stale",
            }

            body = json.dumps(ALERT).encode()
            refused = web.post("/api/alertmanager", content=body)
            assert refused.status_code == 401 and "token" in refused.json()["error"]
            wrong = web.post("/api/alertmanager", content=body, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            accepted = web.post(
                "/api/alertmanager",
                content=body,
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )
            assert (accepted.status_code, accepted.json()) == (200, {"accepted": 1})
    assert proc.returncode == 0
    log = (tmp_path / "service.log").read_text()
    assert TOKEN not in log and '"msg": "stopped"' in log


def test_console_listen_alone_is_refused_with_what_to_write_instead(tmp_path: Path) -> None:
    (tmp_path / "aiops.toml").write_text('[console]\nlisten = "127.0.0.1:9485"\n')
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    ran = subprocess.run(
        aiops_cmd(
            "run",
            "--db",
            str(tmp_path / "x.duckdb"),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--sim",
            str(scenario),
        ),
        capture_output=True,
        text=True,
        timeout=60,
        env=service_env(tmp_path),
    )
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "console.listen" in ran.stderr and "[console] enabled = true" in ran.stderr
    assert not (tmp_path / "x.duckdb").exists()  # refused before anything was made


def test_the_console_keys() -> None:
    from aiops.cli.run import console_enabled
    from aiops.config import parse_config

    assert console_enabled(parse_config({}, "c.toml")) is False
    assert console_enabled(parse_config({"console": {"enabled": True}}, "c.toml")) is True
    kept = {"enabled": False, "listen": "127.0.0.1:9485"}  # listen: only `aiops console serve`'s address
    assert console_enabled(parse_config({"console": kept}, "c.toml")) is False
    both = {"enabled": True, "listen": "127.0.0.1:9485"}
    assert console_enabled(parse_config({"console": both}, "c.toml")) is True
    nowhere = parse_config({"console": {"enabled": True}, "http": {"listen": ""}}, "c.toml")
    with pytest.raises(ConfigError, match=r"c\.toml: field 'console\.enabled': .*\[http\] listen"):
        console_enabled(nowhere)
