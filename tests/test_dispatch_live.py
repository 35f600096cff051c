"""Issue 24, must-show: "a power limit approved in the fleet console executes on the right node agent, which
checks the signature". Live, every part a real process: two node agents of one twin (`aiops run --sim S --node
nodeK`, each with its own allowed-signers file and /api token), a real Prometheus scraping them, and `aiops
fleet` with its console. The fleet diagnoses node1's GPU held under a power limit set far too low and files its
plan, whose first physical step restores the default limit (a reset_power_limit); bob signs in to the fleet's
console, pastes alice's SSH signature over the proposal's own approval message the page shows (the per-proposal
path; one signature over a whole step is tests/test_console_steps_browser.py); the fleet's loop dispatches the
proposal to node1's agent (not node0's), which verifies alice's signature against its own file and runs it: the
twin's limit for that GPU goes back up in node1's exports, node1's audit names alice, and the fleet's proposal
shows executed with node1's answer in its audit chain. (A thermal fault no longer gives a power cap here: the
twin's hot GPU throttles below what one guardrail step could cap it to, so the plan says so and moves work.)"""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx

from aiops.store import Workspace
from guardrails.audit import read_rows
from guardrails.signing import NAMESPACE
from tests.dispatch_helpers import PASSWORD, live_fleet
from tests.service_helpers import get, get_json, wait_for

SCENARIO = """\
name: dispatch-live-thermal
seed: 11
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
faults:
  - {kind: power_cap_misconfig, target: node1/gpu1, start_s: 30, severity: 0.9}
"""
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def power_limit_w(port: int, gpu: str) -> float:
    text = get(f"http://127.0.0.1:{port}/metrics")[1].decode()
    found = [line for line in text.splitlines() if line.startswith("aiops_gpu_power_limit_watts{")]
    return float(next(line for line in found if f'gpu="{gpu}"' in line).rsplit(" ", 1)[1])


def power_proposal(port: int) -> dict[str, Any] | None:
    for p in get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]:
        if (
            p["kind"] == "reset_power_limit"
            and p["target"].split("/")[0] == "node1"
            and p["status"] == "pending"
        ):
            return dict(p)
    return None


def found(pattern: str, page: str) -> str:
    match = re.search(pattern, page)
    assert match is not None, (pattern, page[-1500:])
    return html.unescape(match.group(1))


def csrf(page: str) -> str:
    match = _CSRF.search(page)
    assert match is not None, page[-1500:]
    return match.group(1)


def test_a_power_limit_approved_in_the_fleet_console_runs_on_the_right_node(tmp_path: Path) -> None:
    # the fleet's window two scrapes long (4 s): the claim is where the dispatch runs, not detection's
    with live_fleet(tmp_path, SCENARIO, window_s=4.0) as live:
        keys, ports, port = live.keys, live.ports, live.port
        proposal = wait_for(lambda: power_proposal(port), 150, "the fleet's reset_power_limit proposal")
        pid, target = str(proposal["proposal_id"]), str(proposal["target"])
        gpu = target if "/" in target else f"{target}/gpu1"
        before = power_limit_w(ports["node1"], gpu)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", follow_redirects=True, timeout=30) as web:
            signed_in = web.post(
                "/login",
                data={"name": "bob", "password": PASSWORD, "csrf_token": csrf(web.get("/login").text)},
            )
            assert signed_in.status_code == 200 and signed_in.url.path == "/", signed_in.text[-800:]
            page = web.get(f"/incidents/{proposal['incident_id']}").text
            assert "a node verifies SSH signatures; paste one" in page
            section = page[page.index(f'id="proposal-{pid}"') :]
            message = found(r'<pre class="to-sign">([^<]+)</pre>', section)
            window = {
                name: found(rf'name="{name}" value="([^"]+)"', section) for name in ("ts_s", "expires_ts_s")
            }
            signature = subprocess.run(
                ["ssh-keygen", "-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(keys.keys["alice"])],
                input=message.encode("ascii"),
                capture_output=True,
                check=True,
            ).stdout.decode("ascii")
            answer = web.post(
                f"/proposals/{pid}/approve-signed",
                data={"csrf_token": csrf(section), "signature": signature, **window},
            )
            assert "signed by alice" in answer.text, answer.text[-1500:]

        def executed() -> bool:
            found = get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]
            return any(p["proposal_id"] == pid and p["status"] == "executed" for p in found)

        wait_for(executed, 60, "the fleet's proposal executed on the node")
        wait_for(
            lambda: power_limit_w(ports["node1"], gpu) > before,
            30,
            "node1's exported limit to go back up",
        )
    with Workspace(tmp_path / "fleet.duckdb").read() as store:
        result = [r.data() for r in read_rows(store, proposal_id=pid, event="dispatch_result")]
    assert len(result) == 1 and result[0]["node"] == "node1" and result[0]["outcome"] == "executed", result
    with Workspace(tmp_path / "node1.duckdb").read() as store:
        on_node = [(r.event, r.actor) for r in read_rows(store, proposal_id=pid)]
    assert ("approval", "alice") in on_node and ("execution", "executor") in on_node, on_node
    assert result[0]["node_audit_seq"] == max(r.seq for r in read_rows_of(tmp_path / "node1.duckdb", pid))
    with Workspace(tmp_path / "node0.duckdb").read() as store:
        assert read_rows(store, proposal_id=pid) == []  # the other node never saw it


def read_rows_of(db: Path, pid: str) -> list[Any]:
    with Workspace(db).read() as store:
        return list(read_rows(store, proposal_id=pid))
