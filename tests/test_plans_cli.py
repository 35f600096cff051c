"""`aiops plans list|show|propose` and `aiops actions approve|message STEP` on the demo's workspace (a fan failure
on node3/gpu5, an idle node7): the plan is listed with its steps (a ticket and a cap proposed, a move to node7
and a drain waiting); a step's message written to a file, signed by
ssh-keygen elsewhere and handed back approves and runs it (the file must be the exact bytes written); a waiting
step is proposed on request and then approved with --key; `aiops actions list` names each proposal's step."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.clirun import run_cli
from tests.console_helpers import copy_demo, make_demo
from tests.signing_helpers import make_keys


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("plans-cli-demo"))


def test_a_step_is_approved_from_the_command_line(
    demo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = make_keys(tmp_path / "keys", ("alice", "bob"))
    monkeypatch.setenv("AIOPS_CONFIG", str(keys.config))
    db = str(copy_demo(demo, tmp_path / "ws"))
    listed = run_cli("plans", "list", "--db", db, "--json")
    assert listed.returncode == 0, listed.stderr
    (plan,) = json.loads(listed.stdout)
    kinds = [(s["kind"], s["status"]) for s in plan["steps"]]
    assert kinds == [("notify", "proposed"), ("limit", "proposed"), ("move", "waiting"), ("drain", "waiting")]
    limit, move = plan["steps"][1]["step_id"], plan["steps"][2]["step_id"]
    shown = run_cli("plans", "show", move, "--db", db)
    assert "Move the work on node3 to node7" in shown.stdout and "48 GPUs" in shown.stdout, shown.stdout

    message = tmp_path / "step.json"
    written = run_cli("actions", "message", limit, "--out", str(message), "--db", db)
    assert written.returncode == 0 and "1 target(s)" in written.stdout, written.stdout + written.stderr
    subprocess.run(
        [
            "ssh-keygen",
            "-Y",
            "sign",
            "-q",
            "-n",
            "aiops-approval",
            "-f",
            str(keys.keys["alice"]),
            str(message),
        ],
        check=True,
        capture_output=True,
    )
    edited = tmp_path / "edited.json"
    edited.write_bytes(message.read_bytes() + b"\n")
    refused = run_cli(
        "actions", "approve", limit, "--signature", f"{message}.sig", "--message", str(edited), "--db", db
    )
    assert refused.returncode != 0 and "not the exact bytes signed" in refused.stderr, refused.stderr
    done = run_cli("actions", "approve", limit, "--signature", f"{message}.sig", "--db", db)
    assert done.returncode == 0 and "signed by alice" in done.stdout and "executed" in done.stdout, (
        done.stdout
    )

    asked = run_cli("plans", "propose", move, "--db", db)
    assert asked.returncode == 0 and "proposed" in asked.stdout, asked.stderr
    signed = run_cli("actions", "approve", move, "--key", str(keys.keys["bob"]), "--db", db)
    assert signed.returncode == 0 and "signed by bob" in signed.stdout, signed.stdout + signed.stderr
    rows = json.loads(run_cli("actions", "list", "--db", db, "--json").stdout)
    assert {r["step_id"] for r in rows} == {s["step_id"] for s in plan["steps"] if s["kind"] != "drain"}
    assert sorted(r["status"] for r in rows if r["step_id"] in (limit, move)) == ["executed", "executed"]
