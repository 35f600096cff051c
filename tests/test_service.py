"""`aiops run --sim` end to end, with real servers: a real Prometheus scrapes the service (its HTTP API then
returns the temperature of every simulated GPU and, once the fault has begun, the open incident), promtool
checks /metrics; SIGTERM flushes and exits 0, kill -9 loses at most a batch and a restart continues; one
service per workspace; commands work on a served workspace and the service executes what people approve (that
one with the service in-process on a held clock: tests/service_inprocess.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import tomllib
import urllib.parse
from pathlib import Path

from aiops.store import Workspace
from tests.service_helpers import (
    TINY_SCENARIO,
    aiops_cmd,
    free_port,
    get,
    get_json,
    require_binary,
    running_service,
    service_env,
    wait_for,
)
from tests.service_inprocess import HeldClock, service_in_process
from tests.signing_helpers import shared_keys

GPUS = 8  # TINY_SCENARIO: 2 nodes x 4 GPUs


def _scenario(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY_SCENARIO)
    return path


def _prometheus(tmp_path: Path, target_port: int) -> tuple[subprocess.Popen[bytes], int]:
    binary = require_binary("prometheus")
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: aiops\n    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("ab")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )
    return proc, port


def _query(port: int, promql: str) -> list[dict[str, object]]:
    body = get_json(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def test_a_real_prometheus_scrapes_the_twin_service(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    db = tmp_path / "svc.duckdb"
    with running_service(tmp_path, db, "--sim", str(_scenario(tmp_path)), "--speed", "10") as (_, port):
        prometheus, prom_port = _prometheus(tmp_path, port)
        try:
            wait_for(
                lambda: get(f"http://127.0.0.1:{prom_port}/-/ready", 2)[0] == 200, 60, "prometheus ready"
            )
            wait_for(lambda: _query(prom_port, 'count_over_time(up{job="aiops"}[5m]) >= 3'), 60, "3 scrapes")
            temps = _query(prom_port, "aiops_gpu_temperature_celsius")
            assert len({str(r["metric"]["gpu"]) for r in temps}) == GPUS  # type: ignore[index]
            # the twin's sysfs, read by the real sysfs collectors: a CPU package zone per node
            zones = _query(prom_port, 'aiops_thermal_zone_celsius{type="x86_pkg_temp"}')
            assert {str(r["metric"]["node"]) for r in zones} == {"node0", "node1"}  # type: ignore[index]
            # the fault begins at 90 simulated s (9 s of wall time at 10x): the open incident shows up
            found = wait_for(lambda: _query(prom_port, "aiops_incident_open == 1"), 90, "the open incident")
            labels = found[0]["metric"]
            assert labels["root_cause"] == "thermal_throttle" and labels["component"] == "node1/gpu2", labels
        finally:
            prometheus.send_signal(signal.SIGTERM)
            prometheus.wait(timeout=30)
        status, metrics = get(f"http://127.0.0.1:{port}/metrics")
        assert status == 200
        checked = subprocess.run(
            [promtool, "check", "metrics"], input=metrics, capture_output=True, timeout=60
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        incidents = get_json(f"http://127.0.0.1:{port}/api/incidents")["incidents"]
        assert incidents and incidents[0]["top_hypothesis"]["root_cause"] == "thermal_throttle"
        detail = get_json(f"http://127.0.0.1:{port}/api/incidents/{incidents[0]['incident_id']}")
        assert detail["hypotheses"][0]["evidence"] and detail["symptoms"]
        proposals = get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]
        assert any(p["origin"] == "service" and p["status"] == "pending" for p in proposals)


def _counts(db: Path) -> tuple[int, int]:
    with Workspace(db).read() as store:
        return int(store.scalar("SELECT count(*) FROM gpu_samples")), int(
            store.scalar("SELECT count(*) FROM twin_log")
        )


def test_sigterm_flushes_and_a_killed_service_restarts_where_it_was(tmp_path: Path) -> None:
    db, scenario = tmp_path / "svc.duckdb", _scenario(tmp_path)
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "20") as (proc, port):
        time.sleep(3)
        assert get(f"http://127.0.0.1:{port}/api/incidents")[0] == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    samples, steps = _counts(db)
    log = (tmp_path / "service.log").read_text()
    assert '"msg": "stopped"' in log and samples > 0 and steps > 0
    with Workspace(
        db
    ).read() as store:  # everything it collected landed: the last flush came after the last tick
        newest = float(store.scalar("SELECT max(ts_s) FROM gpu_samples"))
        twin_elapsed = float(
            store.scalar(
                "SELECT max(elapsed_s + CAST(json_extract(payload, '$.seconds') AS DOUBLE)) "
                "FROM twin_log WHERE kind = 'advance'"
            )
        )
        epoch = float(store.scalar("SELECT epoch_ts_s FROM sim_runs"))
    assert abs((newest - epoch) - twin_elapsed) < 1e-6  # the twin's log and the telemetry agree to the second

    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "20", log_name="second.log") as (
        proc,
        _,
    ):
        time.sleep(3)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    after_kill, _ = _counts(db)
    assert after_kill > samples  # it resumed the same twin and kept writing until the kill
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "20", log_name="third.log") as (
        _,
        port,
    ):
        wait_for(lambda: _counts(db)[0] > after_kill, 60, "the restarted service to write")
        with Workspace(db).read() as store:
            gaps = store.scalar(
                "SELECT count(*) FROM (SELECT ts_s - lag(ts_s) OVER (ORDER BY ts_s) AS gap FROM "
                "(SELECT DISTINCT ts_s FROM gpu_samples)) WHERE gap > 1.5"
            )
        assert gaps <= 1  # at most the batch in flight at the kill is missing


def test_one_service_per_workspace_names_the_holder(tmp_path: Path) -> None:
    db, scenario = tmp_path / "svc.duckdb", _scenario(tmp_path)
    with running_service(tmp_path, db, "--sim", str(scenario)) as (proc, _):
        second = subprocess.run(
            aiops_cmd("run", "--db", str(db), "--listen", f"127.0.0.1:{free_port()}", "--sim", str(scenario)),
            capture_output=True,
            text=True,
            timeout=60,
            env=service_env(tmp_path),
        )
        assert second.returncode == 4
        assert f"another aiops run (PID {proc.pid}) serves this workspace" in second.stderr


def test_commands_work_on_a_served_workspace_and_the_service_executes_approvals(tmp_path: Path) -> None:
    """The service in-process on a held clock (tests/service_inprocess.py): the fault's proposal comes when the
    test runs the loop to it, not after wall seconds; the commands are real processes, through its leases."""
    db = tmp_path / "svc.duckdb"
    (tmp_path / "aiops.toml").write_text(shared_keys().config.read_text())  # the service verifies signatures
    env = service_env(tmp_path)
    config = tomllib.loads(shared_keys().config.read_text()) | {"http": {"listen": "127.0.0.1:0"}}
    held = HeldClock(time.time())
    with service_in_process(db, TINY_SCENARIO, config, held, speed=10) as service:
        assert service.http is not None
        port = service.http.port

        def physical_pending() -> bool:
            proposals = get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]
            return any(p["status"] == "pending" and p["physical"] for p in proposals)

        held.run_until_true(physical_pending, 120, "physical proposal filed by the service")
        listed = subprocess.run(
            aiops_cmd("actions", "list", "--db", str(db), "--json"),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert listed.returncode == 0, listed.stderr
        proposal = next(p for p in json.loads(listed.stdout) if p["physical"] and p["status"] == "pending")
        approved = subprocess.run(
            aiops_cmd(
                "actions",
                "approve",
                proposal["proposal_id"],
                "--key",
                str(shared_keys().keys["alice"]),
                "--db",
                str(db),
            ),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert approved.returncode == 0, approved.stderr
        assert "approvals wait for it" in " ".join(
            approved.stdout.split()
        )  # the service executes, not the CLI

        def executed() -> bool:
            found = [
                p
                for p in get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]
                if p["proposal_id"] == proposal["proposal_id"]
            ]
            return bool(found) and found[0]["status"] == "executed"

        held.run_until_true(executed, held.monotonic() + 60, "execution of the approved proposal")
        verify = subprocess.run(
            aiops_cmd("audit", "verify", "--db", str(db)), capture_output=True, text=True, timeout=60, env=env
        )
        assert verify.returncode == 0 and "audit log ok" in verify.stdout
    with Workspace(db).read() as store:
        assert store.scalar("SELECT count(*) FROM twin_log WHERE kind = 'action'") == 1


def test_analyze_without_telemetry_says_so_never_healthy(tmp_path: Path) -> None:
    db = tmp_path / "empty.duckdb"
    with Workspace(db).write():
        pass
    done = subprocess.run(
        aiops_cmd("analyze", "--db", str(db)),
        capture_output=True,
        text=True,
        timeout=60,
        env=service_env(tmp_path),
    )
    assert done.returncode == 3 and f"no telemetry in {db}" in done.stderr and "healthy" not in done.stdout
