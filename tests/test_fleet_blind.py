"""Issue 35 "never blind in silence", must-show, with real processes: two node agents of one twin (`aiops run
--sim S --node nodeK`), a real Prometheus scraping them every second, `aiops fleet` reading it at a 1 s step with
its console and a loopback webhook receiver; Prometheus scrapes the fleet as well (the chart's ServiceMonitor).

1. A killed node agent (kill -9 of node1's `aiops run`): the fleet opens "node agent lost on node1" at the first
   scrape Prometheus's targets API says was refused (nothing listens), one scrape interval after its last sample
   (data time), with its last-seen time and why, notifies it, and raises nothing else about node1's GPUs; an
   agent started again in its place at once (it starts while the page's last-sample check runs) resolves it.
2. Prometheus unreachable for 60 s (its process stopped, then started again on the same port and data
   directory): /readyz 503 naming the blindness, one warning log line, one notification through the webhook
   (`incident.condition` = `source_blind`), a banner on the console's pages, the condition in /api/coverage;
   when Prometheus is back: /readyz 200, one "recovered" line, the resolution notified, and the 60 s gap in every
   series is no node agent lost and no incident of the analyst's.

AIOPS_BLIND_E2E_OUTAGE_S shortens the outage for a quick run (the issue's 60 s is the default)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from aiops.console.accounts import Accounts, accounts_path
from aiops.store import Workspace
from tests.agent_cluster import agent_cmd, agents, labels, prometheus_process, scrape
from tests.notify_helpers import Request, receiver
from tests.service_helpers import get, get_json, service_env, wait_for
from tests.test_fleet_live import fleet

# Two agents: one killed, one that goes on (what "nothing else raised" and the outage's "no node agent lost" are
# judged against); a third added nothing the test asserts and cost its start-up and ~1 CPU-s a wall minute
NODES = ("node0", "node1")
LOST = "node1"
OUTAGE_S = float(os.environ.get("AIOPS_BLIND_E2E_OUTAGE_S", "60"))
SCRAPE_S = 1.0  # Prometheus's scrape interval and the fleet's step (wall seconds)
PASSWORD = "correct horse battery staple"
SCENARIO = """\
name: fleet-blind
seed: 5
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
"""


def incidents(port: int) -> list[dict[str, Any]]:
    return list(get_json(f"http://127.0.0.1:{port}/api/incidents")["incidents"])


def titled(port: int, title: str) -> dict[str, Any] | None:
    return next((i for i in incidents(port) if i["title"] == title), None)


def events(got: list[Request], incident_id: str, event: str) -> list[Request]:
    return [
        r for r in got if (r.body or {}).get("event") == event and r.body["incident"]["id"] == incident_id
    ]


def log_lines(path: Path, level: str, needle: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("level") == level and needle in line.get("msg", "")]


def last_scrape(prom: int, instance: str) -> str:
    """Prometheus's `lastScrape` of the target (its targets API)."""
    targets = get_json(f"http://127.0.0.1:{prom}/api/v1/targets")["data"]["activeTargets"]
    return next(str(t["lastScrape"]) for t in targets if t["labels"].get("instance") == instance)


def ready(port: int) -> tuple[int, str]:
    status, body = get(f"http://127.0.0.1:{port}/readyz", 2.0)
    return status, body.decode()


def test_a_lost_agent_and_a_blind_source_are_said_notified_and_resolved(tmp_path: Path) -> None:
    scenario = tmp_path / "fleet-blind.yaml"
    scenario.write_text(SCENARIO)
    epoch_ts_s = time.time()
    Accounts(accounts_path(str(tmp_path / "fleet.duckdb"))).add("vera", "viewer", PASSWORD)
    procs: dict[str, subprocess.Popen[bytes]] = {}
    with (
        receiver() as sink,
        prometheus_process(tmp_path, SCRAPE_S) as prom,
        agents(tmp_path, scenario, epoch_ts_s, NODES, "1", procs) as ports,
    ):
        config = tmp_path / "fleet.toml"
        config.write_text(
            f'[console]\nenabled = true\n\n[[notify.webhooks]]\nurl = "{sink.url}/hook"\nkind = "json"\n'
        )
        scrape(prom.port, prom.targets, ports)
        with fleet(tmp_path, prom.port, config, "fleet.log", SCRAPE_S) as (_, port):
            # Prometheus scrapes the fleet too, as the chart's ServiceMonitor has it: the fleet exports its own
            # sight, never the nodes' inventory (a second instance declaring every node, read back as theirs)
            scrape(prom.port, prom.targets, {**ports, "fleet": port})
            wait_for(lambda: ready(port)[0] == 200, 90, "the fleet ready")
            wait_for(
                lambda: (
                    get_json(f"http://127.0.0.1:{port}/api/coverage")["totals"]["nodes_reporting"]
                    == len(NODES)
                ),
                60,
                "every node reporting",
            )
            exported = get(f"http://127.0.0.1:{port}/metrics")[1].decode()
            assert "aiops_fleet_source_blind 0.0" in exported and "\naiops_node_info{" not in exported
            wait_for(lambda: labels(prom.port, "aiops_fleet_source_blind"), 30, "the fleet scraped")

            # -- 1. a node agent killed, then back -----------------------------------------------------------
            # just after one of its scrapes, not in the middle of the next (a connection queued when the process
            # died is reset, not refused: one failure that is not a refusal, then the refusal)
            newest = last_scrape(prom.port, f"127.0.0.1:{ports[LOST]}")
            wait_for(
                lambda: last_scrape(prom.port, f"127.0.0.1:{ports[LOST]}") != newest,
                10,
                "a fresh scrape of the agent to kill",
                interval_s=0.05,
            )
            procs[LOST].send_signal(signal.SIGKILL)
            procs[LOST].wait(timeout=10)
            lost = wait_for(
                lambda: titled(port, f"node agent lost on {LOST}"), 60, "the lost agent's incident"
            )
            detail = get_json(f"http://127.0.0.1:{port}/api/incidents/{lost['incident_id']}")
            symptom = detail["symptoms"][0]
            assert symptom["kind"] == "node_agent_lost" and symptom["component"] == LOST, detail
            last_seen_ts_s = symptom["detail"]["last_seen_ts_s"]

            # started again in its place at once: it starts while the checks below run
            restarted_ts_s = time.time()
            with (tmp_path / f"{LOST}-again.log").open("ab") as log:
                procs[LOST] = subprocess.Popen(
                    agent_cmd(tmp_path, scenario, epoch_ts_s, LOST, "1", f"127.0.0.1:{ports[LOST]}"),
                    stdout=log,
                    stderr=log,
                    env=service_env(tmp_path),
                )

            def newest_row() -> float:
                """The newest stored sample of the killed agent (the one started again scrapes no earlier)."""
                with Workspace(tmp_path / "fleet.duckdb").read() as store:
                    return float(
                        store.scalar(
                            "SELECT max(ts_s) FROM gpu_samples WHERE node = ? AND ts_s < ?",
                            [LOST, restarted_ts_s],
                        )
                        or 0
                    )

            # Prometheus's own word (its targets API): the first scrape after the kill was refused, nothing
            # listens on the agent's port: lost at that scrape, one interval after its last sample (data times)
            scraped = symptom["detail"]["scrape"]
            assert scraped["refused"] and "connection refused" in scraped["error"], symptom
            opened_ts_s = lost["opened_ts_s"]
            # lost at the first failed scrape the fleet saw (later ones, seen by the time this reads, count on), or
            # sooner: a loop stalled by load reads two missed steps of presence before its watch polls the targets
            assert scraped["first_failed_ts_s"] == scraped["lost_at_ts_s"] >= opened_ts_s, scraped
            # one interval after the last sample; two or three where a late tick's poll saw only a later refused
            # scrape (the fleet polls once a tick, and 1 s scrapes land twice or three times between two ticks
            # the suite's load delays: 3.0 s once, fresh62 of 2026-12-07)
            assert 0 <= opened_ts_s - last_seen_ts_s <= 3 * SCRAPE_S + 0.1, (lost, last_seen_ts_s)
            assert "nothing listens" in symptom["detail"]["reason"] and symptom["detail"]["gpu"] == 2, symptom
            assert detail["hypotheses"] == [] and lost["top_hypothesis"] is None  # a condition, not a cause
            sink.wait_for(lambda got: len(events(got, lost["incident_id"], "opened")) == 1, 30)

            # its last sample (the last scrape that went through) is the newest row the step reads store of it,
            # once they have read that far: the page comes before the step read of the agent's last scrape
            stored = wait_for(
                lambda: (t := newest_row()) >= last_seen_ts_s - SCRAPE_S and t, 30, "its last sample read"
            )
            assert abs(last_seen_ts_s - stored) <= SCRAPE_S, (last_seen_ts_s, stored)

            # the agent started again in the lost one's place: read again, its incident resolved, notified once
            back = wait_for(
                lambda: (i := titled(port, f"node agent lost on {LOST}")) and i["status"] == "resolved" and i,
                60,
                "the lost agent's incident resolved",
            )
            sink.wait_for(lambda got: len(events(got, back["incident_id"], "resolved")) == 1, 30)
            # its GPUs' silence was the lost agent, nothing of the analyst's about them
            about = [i for i in incidents(port) if i["incident_id"] != lost["incident_id"]]
            assert not [i for i in about if any(str(c).startswith(LOST) for c in i["components"])], about

            # -- 2. Prometheus unreachable, then back ---------------------------------------------------------
            wait_for(lambda: ready(port)[0] == 200, 30, "the fleet ready before the outage")
            before = {i["incident_id"] for i in incidents(port)}
            prom.stop()
            stopped_s = time.monotonic()
            why = wait_for(lambda: (r := ready(port))[0] == 503 and r[1], 30, "/readyz 503 while blind")
            assert "blind" in why and f"127.0.0.1:{prom.port}" in why, why
            blind = wait_for(
                lambda: titled(port, "fleet blind: cannot read its time-series store"), 30, "blind"
            )
            opened = sink.wait_for(lambda got: len(events(got, blind["incident_id"], "opened")) == 1, 30)
            body = events(opened, blind["incident_id"], "opened")[0].body
            assert (
                body["incident"]["condition"] == "source_blind" and body["incident"]["severity"] == "critical"
            )
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", follow_redirects=True, timeout=30) as web:
                token = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/login").text)
                assert token is not None
                page = web.post("/login", data={"name": "vera", "password": PASSWORD, "csrf_token": token[1]})
                assert page.status_code == 200 and 'id="blind-banner"' in page.text, page.text[-1500:]
                assert "fleet blind" in page.text and "the cluster looks healthy" not in page.text
                assert 'id="blind-banner"' in web.get("/coverage").text
            seen = get_json(f"http://127.0.0.1:{port}/api/coverage")
            assert [c["kind"] for c in seen["conditions"]] == ["source_blind"], seen["conditions"]
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped_s)))
            assert ready(port)[0] == 503
            prom.start()
            wait_for(lambda: ready(port)[0] == 200, 60, "the fleet ready again")
            sink.wait_for(lambda got: len(events(got, blind["incident_id"], "resolved")) == 1, 30)
            time.sleep(4 * SCRAPE_S)  # a few cycles over the gap and after it: nothing else is raised
            after = [i for i in incidents(port) if i["incident_id"] not in before]
            assert [i["title"] for i in after] == [blind["title"]], after
        log = tmp_path / "fleet.log"
        assert len(log_lines(log, "warning", "fleet blind")) == 1, log.read_text()[-3000:]
        assert len(log_lines(log, "info", "fleet blind: cannot read its time-series store: recovered")) == 1
        assert len(log_lines(log, "warning", f"node agent lost on {LOST}")) == 1
        got = sink.got()
        assert len(events(got, blind["incident_id"], "opened")) == 1, [r.body for r in got]
        assert len(events(got, blind["incident_id"], "resolved")) == 1
