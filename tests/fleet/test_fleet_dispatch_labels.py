"""Issue 36, H1 end to end with real processes: "the dispatch goes where a label says". Two node agents of one
twin (`aiops run --sim S --node nodeK`, each with the /api token), a real Prometheus whose scrape config
relabels node1's `aiops_gpu_info` `node` label to a foreign URL (`127.0.0.1:PORT/x#`, PORT a capture server's),
`aiops fleet` reading it, and the capture server. The fleet diagnoses node1/gpu1's power cap and files a
GPU-targeted proposal; alice approves it with her SSH key (`aiops actions approve` on the fleet's workspace);
the fleet's loop dispatches it.

On main (cc01cd6) the GPU's node became the foreign URL and the fleet POSTed the approved dispatch, with the
node agents' token and alice's signature, to the capture server. Now: the capture server receives nothing at
all, the proposal runs on node1's real agent (its audit names alice), node0 never sees it, and the foreign label
is named in the fleet's log."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.agent_cluster import agents
from tests.dispatch_helpers import TOKEN
from tests.prometheus_process import prometheus_running
from tests.service_helpers import aiops_cmd, get_json, wait_for
from tests.signing_helpers import make_keys
from tests.test_fleet_live import SCRAPE_S, fleet

NODES = ("node0", "node1")
SCENARIO = """\
name: h1-foreign-node-label
seed: 5
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
faults:
  - {kind: power_cap_misconfig, target: node1/gpu1, start_s: 20, severity: 0.9}
"""


class _Capture(http.server.ThreadingHTTPServer):
    daemon_threads = True
    seen: list[dict[str, Any]]


class _Record(http.server.BaseHTTPRequestHandler):
    server: _Capture

    def _any(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        self.server.seen.append(
            {
                "path": self.path,
                "headers": dict(self.headers),
                "body": self.rfile.read(length).decode("latin-1"),
            }
        )
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        body = json.dumps({"status": "executed", "message": "captured"}).encode()
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _any

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def capture() -> Iterator[_Capture]:
    server = _Capture(("127.0.0.1", 0), _Record)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@contextmanager
def relabelling_prometheus(tmp_path: Path, ports: dict[str, int], foreign: str) -> Iterator[int]:
    """A real Prometheus scraping both agents every second; node1's target has a metric relabelling rule that
    sets its GPUs' `aiops_gpu_info` `node` label to `foreign` (what any target scraped with honor_labels, or
    whoever edits the scrape config, can do)."""
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {SCRAPE_S:g}s, evaluation_interval: {SCRAPE_S:g}s}}\n"
        "scrape_configs:\n"
        f"  - {{job_name: aiops, honor_labels: true, static_configs: [{{targets: ['127.0.0.1:{ports['node0']}']}}]}}\n"
        "  - job_name: aiops-relabelled\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{ports['node1']}']}}]\n"
        "    metric_relabel_configs:\n"
        "      - {source_labels: [__name__], regex: aiops_gpu_info, target_label: node, "
        f"replacement: {json.dumps(foreign)}}}\n"
    )
    with prometheus_running(config, tmp_path) as port:
        yield port


def gpu_proposal(port: int) -> dict[str, Any] | None:
    for p in get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]:
        if p["target"] == "node1/gpu1" and p["status"] == "pending" and p["physical"]:
            return dict(p)
    return None


def test_a_foreign_node_label_never_chooses_where_an_approved_action_goes(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice", "bob"))
    (tmp_path / "token").write_text(TOKEN + "\n")
    (tmp_path / "aiops.toml").write_text(
        keys.config.read_text() + f'\n[http]\ntoken_file = "{tmp_path / "token"}"\n'
    )
    scenario = tmp_path / "h1.yaml"
    scenario.write_text(SCENARIO)
    with capture() as attacker, agents(tmp_path, scenario, time.time(), NODES, "10") as ports:
        foreign = f"127.0.0.1:{attacker.server_address[1]}/x#"
        with relabelling_prometheus(tmp_path, ports, foreign) as prom:
            nodes = "\n".join(f'{n} = "http://127.0.0.1:{p}"' for n, p in ports.items())
            config = tmp_path / "fleet.toml"
            config.write_text(
                keys.config.read_text()
                + f'\n[fleet]\nnode_token_file = "{tmp_path / "token"}"\n'
                + f"\n[fleet.nodes]\n{nodes}\n"
                + "\n[detection]\nwindow_s = 4.0\n"  # two scrapes a window: the proposal comes ~6 s sooner
            )
            with fleet(tmp_path, prom, config, "fleet.log") as (_, port):
                proposal = wait_for(lambda: gpu_proposal(port), 150, "the fleet's proposal for node1/gpu1")
                pid = str(proposal["proposal_id"])
                env = {k: v for k, v in os.environ.items() if not k.startswith("AIOPS_")}
                env.update(AIOPS_CONFIG=str(config), HOME=str(keys.folder))
                approved = subprocess.run(
                    aiops_cmd(
                        "actions",
                        "approve",
                        pid,
                        "--key",
                        str(keys.keys["alice"]),
                        "--db",
                        str(tmp_path / "fleet.duckdb"),
                    ),
                    capture_output=True,
                    text=True,
                    env=env,
                    timeout=120,
                )
                assert approved.returncode == 0, approved.stdout + approved.stderr

                def answered() -> str | None:
                    for p in get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]:
                        if p["proposal_id"] == pid and p["status"] in ("executed", "failed", "refused"):
                            return str(p["status"])
                    return None

                outcome = wait_for(answered, 90, "the fleet's dispatch answered")
        assert attacker.seen == [], (
            attacker.seen
        )  # nothing, token and signatures included, went to the label's URL
    assert outcome == "executed", outcome
    with Workspace(tmp_path / "fleet.duckdb").read() as store:
        sent = [r.data() for r in read_rows(store, proposal_id=pid, event="dispatch")]
        result = [r.data() for r in read_rows(store, proposal_id=pid, event="dispatch_result")]
        topology = store.query("SELECT component, node FROM topology WHERE component = 'node1/gpu1'")
    assert {d["node"] for d in sent} == {"node1"} and all(str(ports["node1"]) in d["url"] for d in sent), sent
    assert result and result[-1]["node"] == "node1" and result[-1]["outcome"] == "executed", result
    assert topology == [{"component": "node1/gpu1", "node": "node1"}]
    with Workspace(tmp_path / "node1.duckdb").read() as store:
        on_node = [(r.event, r.actor) for r in read_rows(store, proposal_id=pid)]
    assert ("approval", "alice") in on_node and ("execution", "executor") in on_node, on_node
    with Workspace(tmp_path / "node0.duckdb").read() as store:
        assert read_rows(store, proposal_id=pid) == []
    log = (tmp_path / "fleet.log").read_text()
    assert "refused from the node agents' exports" in log and "x#" in log
