"""Issue 23, the high finding: `aiops run --config FILE` enforces FILE's guardrails, not those of $AIOPS_CONFIG or
~/.config/aiops/config.toml. A real service process is started with FILE allowing only carol while the home
config allows bob: bob's approval in the console is refused and audited, carol's is accepted and executed, and
the audit witness is written where FILE says (not `<db>.witness`). Issue 36 added what the home config also
says and the service must not take: its allowed-signers file (bob's SSH signature, pasted in the console, is
refused: FILE's file lists carol only) and its `[llm]` (the console chat never asks the home config's model,
a capture server here: FILE names none, so the offline analyst answers)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import httpx

from aiops.config import GuardrailsConfig
from aiops.store import Workspace
from guardrails.actions import action_hash
from guardrails.audit import read_rows
from guardrails.records import GuardrailRecords
from guardrails.signing import SshSigner, decision_message
from tests.agent_fakes import ScriptedLLM, final, scripted_llm
from tests.console_helpers import PASSWORD
from tests.service_helpers import TINY_SCENARIO, aiops_cmd, get_json, running_service, wait_for
from tests.signing_helpers import make_keys

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env["HOME"] = str(home)
    if "AIOPS_REQUIRE_EBPF" in os.environ:
        env["AIOPS_REQUIRE_EBPF"] = os.environ["AIOPS_REQUIRE_EBPF"]
    return env


def _approve_in_console(base: str, name: str, pid: str) -> str:
    with httpx.Client(base_url=base, timeout=30) as web:
        token = _CSRF.search(web.get("/login").text)
        assert token is not None
        signed_in = web.post(
            "/login", data={"name": name, "password": PASSWORD, "csrf_token": token.group(1)}
        )
        assert signed_in.status_code == 303, signed_in.text[:500]
        csrf = _CSRF.search(web.get("/").text)
        assert csrf is not None
        decided = web.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf.group(1)})
        assert decided.status_code == 303
        return str(web.get(decided.headers["location"]).text)


def _paste_in_console(base: str, name: str, pid: str, signature: str, window: tuple[float, float]) -> str:
    with httpx.Client(base_url=base, timeout=30) as web:
        token = _CSRF.search(web.get("/login").text)
        assert token is not None
        web.post("/login", data={"name": name, "password": PASSWORD, "csrf_token": token.group(1)})
        csrf = _CSRF.search(web.get("/").text)
        assert csrf is not None
        form = {"csrf_token": csrf.group(1), "signature": signature, "ts_s": repr(window[0])}
        decided = web.post(f"/proposals/{pid}/approve-signed", data={**form, "expires_ts_s": repr(window[1])})
        assert decided.status_code == 303
        return str(web.get(decided.headers["location"]).text)


def _ask_in_console(base: str, name: str) -> list[dict[str, object]]:
    with httpx.Client(base_url=base, timeout=60) as web:
        token = _CSRF.search(web.get("/login").text)
        assert token is not None
        web.post("/login", data={"name": name, "password": PASSWORD, "csrf_token": token.group(1)})
        csrf = _CSRF.search(web.get("/").text)
        assert csrf is not None
        asked = web.post(
            "/chat/ask", data={"question": "what is wrong?"}, headers={"X-CSRF-Token": csrf.group(1)}
        )
        return [json.loads(line[6:]) for line in asked.text.splitlines() if line.startswith("data: ")]


def test_aiops_run_enforces_the_approvers_and_witness_of_its_config_file(tmp_path: Path) -> None:
    with scripted_llm([final("the home config's model answered")]) as llm:
        _enforced(tmp_path, llm)


def _enforced(tmp_path: Path, llm: ScriptedLLM) -> None:
    home, db, scenario = tmp_path / "home", tmp_path / "svc.duckdb", tmp_path / "tiny.yaml"
    # the fault at 40 simulated s, not 90, at 20x: what is enforced does not depend on when (2 s of wall, not 9)
    scenario.write_text(TINY_SCENARIO.replace("start_s: 90,", "start_s: 40,"))
    witness = tmp_path / "elsewhere" / "audit.witness"
    witness.parent.mkdir()
    file_keys = make_keys(tmp_path / "file-keys", ("carol",))
    home_keys = make_keys(tmp_path / "home-keys", ("bob",))
    config_file = tmp_path / "etc" / "config.toml"
    config_file.parent.mkdir()
    config_file.write_text(
        f'[console]\nenabled = true\n\n[guardrails]\nwitness = "{witness}"\n'
        f'allowed_signers = "{file_keys.allowed}"\n\n[guardrails.approvers]\ncarol = ["physical"]\n'
    )
    (home / ".config" / "aiops").mkdir(
        parents=True
    )  # the home config: bob may approve, with his keys, a model
    (home / ".config" / "aiops" / "config.toml").write_text(
        f'[guardrails]\nallowed_signers = "{home_keys.allowed}"\n\n[guardrails.approvers]\nbob = ["physical"]\n\n'
        f'[llm]\nbase_url = "{llm.base_url}"\nmodel = "home-model"\napi_key = "home-key"\n'
    )
    env = _env(home)
    secret = tmp_path / "pw"
    secret.write_text(PASSWORD)
    with running_service(
        tmp_path, db, "--config", str(config_file), "--sim", str(scenario), "--speed", "20", env=env
    ) as (_, api_port):
        base = f"http://127.0.0.1:{api_port}"  # the console is on the service's one listener
        for name in ("bob", "carol"):
            added = subprocess.run(
                aiops_cmd(
                    "console",
                    "adduser",
                    name,
                    "--role",
                    "approver",
                    "--db",
                    str(db),
                    "--password-file",
                    str(secret),
                    "--config",
                    str(config_file),
                ),
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            assert added.returncode == 0, added.stderr

        def proposal(pid: str = "") -> dict[str, object]:
            for p in get_json(f"http://127.0.0.1:{api_port}/api/proposals")["proposals"]:
                if (p["proposal_id"] == pid) or (not pid and p["status"] == "pending" and p["physical"]):
                    return dict(p)
            return {}

        pid = str(wait_for(lambda: proposal().get("proposal_id", ""), 120, "a physical proposal"))
        refused = _approve_in_console(base, "bob", pid)
        assert "refused" in refused and "bob may not approve physical" in refused, refused[-2000:]
        assert proposal(pid)["status"] == "pending"
        # bob's SSH signature, valid under the home config's allowed-signers file only: refused by the service
        with Workspace(db, guardrails=GuardrailsConfig(witness=str(witness))).read() as store:
            record = GuardrailRecords(store).proposal(pid)
        assert record is not None
        window = (time.time() - 1, time.time() + 600)
        message = decision_message(
            "approve",
            ts_s=window[0],
            expires_ts_s=window[1],
            proposal_id=pid,
            action_hash=action_hash(record.action),
        )
        pasted = _paste_in_console(base, "carol", pid, SshSigner(home_keys.keys["bob"]).sign(message), window)
        assert "refused" in pasted and "bob" not in pasted.split("refused", 1)[1][:300], pasted[-2000:]
        assert proposal(pid)["status"] == "pending"
        # the console chat under FILE (no [llm]): the offline analyst, never the home config's model
        events = _ask_in_console(base, "carol")
        assert any(e.get("status") == "answer (analyst)" for e in events), events[:3]
        assert llm.requests == [], llm.requests[:1]
        accepted = _approve_in_console(base, "carol", pid)
        assert "approved by carol" in accepted, accepted[-2000:]
        wait_for(
            lambda: proposal(pid).get("status") == "executed", 60, "the service to execute carol's approval"
        )
        with Workspace(db, guardrails=GuardrailsConfig(witness=str(witness))).read() as store:
            rows = read_rows(store, proposal_id=pid)
        refusals = [r for r in rows if r.event == "approval_refused"]
        assert refusals and refusals[0].actor == "bob" and "may not approve physical" in refusals[0].payload
        assert [r.actor for r in rows if r.event == "approval"] == ["carol"]
        verify = subprocess.run(
            aiops_cmd("audit", "verify", "--db", str(db), "--config", str(config_file), "--witness"),
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        flat = "".join(verify.stdout.split())  # the terminal may wrap the long path
        assert verify.returncode == 0 and f"witness{witness}agrees" in flat, verify.stdout + verify.stderr
    heads = witness.read_text().splitlines()
    assert heads and int(heads[-1].split()[0]) >= max(r.seq for r in rows)  # every append witnessed there
    assert not Path(f"{db}.witness").exists()  # nothing went to the default beside the database
