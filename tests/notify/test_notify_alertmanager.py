"""Against the real Alertmanager (Debian's prometheus-alertmanager): our v2 alerts are accepted, routed by
their labels to a webhook receiver on loopback, superseded by a new diagnosis, and resolved. Skipped when the
binary is missing, except with AIOPS_REQUIRE_EBPF=1 (CI: prerequisites must be present), where it fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiops.integrations.event import IncidentEvent, incident_event
from aiops.integrations.notifier import Notifier
from aiops.store import Workspace
from tests.notify_helpers import (
    HOSTILE,
    Receiver,
    free_port,
    hypothesis,
    incident,
    no_proxies,
    notify_config,
    receiver,
)

ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
ROUTING = """\
global:
  resolve_timeout: 1h
route:
  receiver: aiops-test
  group_by: [incident_id]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: aiops-test
    webhook_configs:
      - url: {url}
        send_resolved: true
"""


def alertmanager_binary() -> str:
    found = ALERTMANAGER if os.access(ALERTMANAGER, os.X_OK) else shutil.which("prometheus-alertmanager")
    if found:
        return found
    reason = f"{ALERTMANAGER} missing (apt-get install prometheus-alertmanager; scripts/setup.sh installs it)"
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail(f"prerequisite missing with AIOPS_REQUIRE_EBPF=1: {reason}")
    pytest.skip(reason)


@pytest.fixture
def alertmanager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Receiver]]:
    """Alertmanager on a free loopback port, clustering off, routing every alert to a local webhook receiver;
    stopped by its PID when the test ends. Yields its base URL and the receiver."""
    binary = alertmanager_binary()
    no_proxies(monkeypatch)
    with receiver() as hook:
        config = tmp_path / "alertmanager.yml"
        config.write_text(ROUTING.format(url=hook.url + "/alertmanager"))
        port = free_port()
        log = (tmp_path / "alertmanager.log").open("wb")
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
                "--log.level=info",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base_url, process, tmp_path / "alertmanager.log")
            yield base_url, hook
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            log.close()


def wait_ready(base_url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"alertmanager exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(base_url + "/-/ready", timeout=1.0) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"alertmanager not ready after {timeout_s} s: {log.read_text()[-2000:]}")


def live_event(kind: str, opened_ts_s: float, with_top: str | None = None) -> IncidentEvent:
    """An event with wall-clock times (Alertmanager compares endsAt with its own clock)."""
    now_ts_s = time.time()
    base = incident(title=f"GPU throttling {HOSTILE}", incident_id="inc-am-1").model_copy(
        update={"opened_ts_s": opened_ts_s, "last_ts_s": now_ts_s}
    )
    tops = [hypothesis(with_top)] if with_top else []
    return incident_event(
        kind,
        base,
        tops,
        node="node3",
        link="http://127.0.0.1:9484/api/incidents/inc-am-1",
        resolved_ts_s=now_ts_s,
    )  # type: ignore[arg-type]


def deliver(notifier: Notifier, workspace: Workspace, event: IncidentEvent) -> None:
    with workspace.write() as store:
        assert notifier.enqueue(store, event) == 1
    stats = notifier.pump(workspace)
    assert stats.delivered == 1, stats  # Alertmanager accepted the v2 body (a 400 would be `failed`)


def alerts_in(requests: list[Any]) -> list[tuple[str, str]]:
    """(status, root_cause) of every alert in every webhook Alertmanager sent."""
    return [(a["status"], a["labels"].get("root_cause", "")) for r in requests for a in r.body["alerts"]]


def test_alertmanager_routes_our_alerts_and_resolves_them(
    tmp_path: Path, alertmanager: tuple[str, Receiver]
) -> None:
    base_url, hook = alertmanager
    notifier = Notifier(notify_config((base_url + "/api/v2/alerts", "alertmanager")), retry_base_s=0.2)
    workspace = Workspace(tmp_path / "ws.duckdb")
    opened_ts_s = time.time() - 5.0

    deliver(notifier, workspace, live_event("opened", opened_ts_s))
    (first,) = hook.wait_for(lambda got: len(got) >= 1)
    assert first.path == "/alertmanager" and first.body["status"] == "firing"
    (alert,) = first.body["alerts"]
    assert alert["labels"] == {
        "alertname": "AiopsIncident",
        "incident_id": "inc-am-1",
        "severity": "critical",
        "node": "node3",
        "root_cause": "undiagnosed",
        "component": "node3/gpu5",
    }
    assert alert["annotations"]["summary"] == f"GPU throttling {HOSTILE}"  # JSON all the way through
    assert alert["generatorURL"] == "http://127.0.0.1:9484/api/incidents/inc-am-1"
    assert first.body["groupLabels"] == {"incident_id": "inc-am-1"}

    # a diagnosis: the thermal alert fires and the undiagnosed one is resolved, in the same group
    deliver(notifier, workspace, live_event("diagnosed", opened_ts_s, "thermal_throttle"))
    hook.wait_for(lambda got: ("firing", "thermal_throttle") in alerts_in(got[1:]))
    hook.wait_for(lambda got: ("resolved", "undiagnosed") in alerts_in(got[1:]))

    deliver(notifier, workspace, live_event("resolved", opened_ts_s, "thermal_throttle"))
    got = hook.wait_for(
        lambda got: any(
            r.body["status"] == "resolved"
            for r in got[1:]
            if ("resolved", "thermal_throttle") in alerts_in([r])
        )
    )
    final = got[-1].body
    assert final["status"] == "resolved" and final["commonLabels"]["incident_id"] == "inc-am-1"
    assert all(status == "resolved" for status, _ in alerts_in([got[-1]]))
