"""Issue 34, must show: "a signature produced by `ssh-keygen -Y sign` and pasted into the console's textarea is
accepted and the step executes on the right node agent", in real headless Chromium (Debian's `chromium` through
Playwright's `executable_path`; nothing downloaded). Every part is a real process on 127.0.0.1: two node agents
of one twin (`aiops run --sim S --node nodeK`, each with its own allowed-signers file and /api token), a real
Prometheus scraping them, and `aiops fleet` with its console.

node1's GPUs run under a power limit somebody set far too low (power_cap_misconfig). The fleet diagnoses it and
files its plan: a ticket, then "Restore the default power limit of node1" (one step). bob signs in to the fleet's
console in Chromium, reads the step's message on the page, alice signs those bytes with ssh-keygen, and bob
pastes the signature into the step's textarea as a person does (the browser submits it with CRLF line endings:
the request is checked to carry them). The console accepts it (signed by alice), the fleet dispatches the step's
target to node1's agent (not node0's) with the signature and the step's targets, node1 checks alice's signature
against its own allowed-signers file, finds its proposal named in the signed step and runs it: node1's exported
limit goes back to its default, node1's audit holds alice's step approval and the execution, and the fleet lists
the proposal executed by node:node1 (not a ticket). Screenshots go to $AIOPS_ARTEFACTS/console."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.clirun import run_cli
from tests.console.test_console_browser import artefacts
from tests.dispatch_helpers import PASSWORD, live_fleet
from tests.report_browser import MIN_VARIANCE, browser, chromium, variance
from tests.service_helpers import get, get_json, wait_for
from tests.signing_helpers import ssh_sign

SCENARIO = """\
name: steps-browser-power-cap
seed: 11
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
faults:
  - {kind: power_cap_misconfig, target: node1, start_s: 30, severity: 0.9}
"""


def limits_w(port: int, node: str) -> list[float]:
    text = get(f"http://127.0.0.1:{port}/metrics")[1].decode()
    rows = [line for line in text.splitlines() if line.startswith("aiops_gpu_power_limit_watts{")]
    return [float(line.rsplit(" ", 1)[1]) for line in rows if f'gpu="{node}/' in line]


def restore_proposal(port: int) -> dict[str, Any] | None:
    for p in get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]:
        if p["kind"] == "reset_power_limit" and p["target"] == "node1" and p["status"] == "pending":
            return dict(p)
    return None


def test_a_step_signed_with_ssh_keygen_and_pasted_in_chromium_runs_on_the_right_node(tmp_path: Path) -> None:
    chromium()  # skip (or fail under AIOPS_REQUIRE_EBPF=1) before starting anything
    posted: list[bytes] = []
    # the fleet's window two scrapes long (4 s): the claim is where the signed step runs, not detection's
    with live_fleet(tmp_path, SCENARIO, window_s=4.0) as live:
        keys, ports, port = live.keys, live.ports, live.port
        proposal = wait_for(
            lambda: restore_proposal(port), 150, "the fleet's plan step restoring node1's limit"
        )
        pid, step_id = str(proposal["proposal_id"]), str(proposal["step_id"])
        before = limits_w(ports["node1"], "node1")
        assert before and max(before) < 400.0, before  # the misconfigured cap, in node1's exports
        base = f"http://127.0.0.1:{port}"
        with browser() as instance:
            context = instance.new_context(viewport={"width": 1280, "height": 1000})  # type: ignore[attr-defined]
            page = context.new_page()

            def record(request: Any) -> None:
                if request.method == "POST" and request.url.endswith(f"/steps/{step_id}/approve-signed"):
                    posted.append(request.post_data_buffer or b"")

            page.on("request", record)
            page.goto(base + "/login", wait_until="load")
            page.fill("input[name=name]", "bob")
            page.fill("input[name=password]", PASSWORD)
            page.click("form.login button")
            page.wait_for_url(base + "/")
            page.goto(f"{base}/incidents/{proposal['incident_id']}", wait_until="load")
            step = page.locator(f"[id='step-{step_id}']")
            assert "Restore the default power limit of node1" in step.inner_text()
            assert "cannot approve a step by your sign-in" in step.inner_text()  # the fleet says it plainly
            message = step.locator("pre.to-sign").inner_text()
            signature = ssh_sign(keys.keys["alice"], message.encode("ascii"))
            step.locator("textarea[name=signature]").fill(signature)
            png = page.screenshot(full_page=True, path=str(artefacts() / "console-step-pasted.png"))
            assert variance(png) > MIN_VARIANCE
            step.locator("button.approve-signed").click()
            page.wait_for_selector("#note")
            note = page.inner_text("#note")
            assert "signed by alice" in note and "node agent" in note, note
            page.screenshot(full_page=True, path=str(artefacts() / "console-step-approved.png"))
            context.close()
        assert posted and b"-----BEGIN SSH SIGNATURE-----\r\n" in posted[0]  # the browser sent CRLF

        def executed() -> bool:
            found = get_json(f"http://127.0.0.1:{port}/api/proposals")["proposals"]
            return any(p["proposal_id"] == pid and p["status"] == "executed" for p in found)

        wait_for(executed, 60, "the step's target executed on node1")
        wait_for(lambda: min(limits_w(ports["node1"], "node1")) >= 690.0, 30, "node1's limit restored")
        assert limits_w(ports["node0"], "node0") == [700.0, 700.0]  # node0 untouched
    listed = run_cli("actions", "list", "--db", str(tmp_path / "fleet.duckdb"), "--json")
    assert listed.returncode == 0, listed.stderr
    row = next(r for r in json.loads(listed.stdout) if r["proposal_id"] == pid)
    assert (row["status"], row["executor"], row["step_id"]) == ("executed", "node:node1", step_id)
    with Workspace(tmp_path / "fleet.duckdb").read() as store:
        result = [r.data() for r in read_rows(store, proposal_id=pid, event="dispatch_result")]
        signed = [r.actor for r in read_rows(store, proposal_id=step_id, event="step_approval")]
    assert signed == ["alice"] and result[0]["node"] == "node1" and result[0]["outcome"] == "executed", result
    with Workspace(tmp_path / "node1.duckdb").read() as store:
        on_node = [(r.event, r.actor) for r in read_rows(store, proposal_id=pid)]
        step_rows = read_rows(store, proposal_id=step_id, event="step_approval")
    assert ("execution", "executor") in on_node, on_node
    assert [r.actor for r in step_rows] == ["alice"]  # the node checked and recorded alice's step signature
    assert any(t["proposal_id"] == pid for t in step_rows[0].data()["targets"])
    with Workspace(tmp_path / "node0.duckdb").read() as store:
        assert read_rows(store, proposal_id=pid) == []  # the other node never saw it
