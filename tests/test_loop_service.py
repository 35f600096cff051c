"""Issue 34, Must show: the service does not undo its own fix. A real `aiops run --sim` of the public scenario
two-input-pipeline-then-thermal-node at 40x (20x until wave 6: the same simulated run in about half the wall time
where the machine keeps up; the CPU is the simulated seconds' and stays): the analyst proposes set_power_limit
for the hot node6; alice approves it with her SSH key (`aiops actions approve --key`, a real ssh-keygen
signature); the service executes it. For the next 150 simulated seconds no incident is opened for it and nothing
proposes to undo it (no reset_power_limit, no higher limit on node6). Then a limit is changed by hand on
node6/gpu3 (NVML set outside the guardrails: a hand-made twin_log entry, the twin's record of what happened to
the hardware; no product config reaches it) and the service still catches it: a power_limit_drop that names the
550 W the service set, diagnosed power_cap_misconfig on node6/gpu3, remedied by putting 550 W back. The cap's
outcome (its effect, judged when its window passed) is on the thermal incident."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from aiops.store import Workspace
from guardrails.actions import Action, canonical_json
from tests.service_helpers import aiops_cmd, get_json, running_service, service_env, wait_for
from tests.signing_helpers import make_keys

SCENARIO = Path(__file__).resolve().parents[1] / "evals/scenarios/two-input-pipeline-then-thermal-node.yaml"
SPEED = "40"
QUIET_S = 150.0  # simulated seconds after the cap in which nothing may be opened for it or undo it


def hand_set_power_limit(db: Path, gpu: str, watts: float) -> None:
    """What `nvidia-smi -i N -pl W` does to the twin's GPU: an NVML set outside the guardrails, written where the
    twin's history is kept (`twin_log`, which the service's twin replays at its next flush). Test-only: no
    command, config or API of the product writes twin_log but the twin's own actuator."""
    with Workspace(db).write() as store:
        rows = store.query("SELECT seq, elapsed_s, kind, payload FROM twin_log ORDER BY seq")
        logged_s = max(
            float(r["elapsed_s"])
            + (json.loads(r["payload"]).get("seconds", 0.0) if r["kind"] == "advance" else 0)
            for r in rows
        )
        action = Action(
            proposal_id="by-hand",
            kind="set_power_limit",
            target=gpu,
            parameters={"power_limit_w": watts},
            proposed_by="analyst",
            created_ts_s=time.time(),
        )
        store.conn.execute(
            "INSERT INTO twin_log VALUES (?, ?, ?, 'action', ?, ?)",
            [
                int(rows[-1]["seq"]) + 1,
                time.time(),
                logged_s,
                action.proposal_id,
                canonical_json({"action": action.model_dump(mode="json")}),
            ],
        )


def _read(db: Path, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    with Workspace(db).read() as store:
        return store.query(sql, params or [])


def _node6(component: str) -> bool:
    return component == "node6" or component.startswith("node6/")


def test_an_approved_cap_is_not_undone_and_a_hand_change_is_still_caught(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    (tmp_path / "aiops.toml").write_text(keys.config.read_text())
    db = tmp_path / "svc.duckdb"
    with running_service(tmp_path, db, "--sim", str(SCENARIO), "--speed", SPEED) as (_, port):
        api = f"http://127.0.0.1:{port}/api"

        def pending_cap() -> str | None:
            for p in get_json(f"{api}/proposals")["proposals"]:
                if p["kind"] == "set_power_limit" and p["target"] == "node6" and p["status"] == "pending":
                    return str(p["proposal_id"])
            return None

        cap = wait_for(pending_cap, 240, "the analyst's set_power_limit for node6")
        approved = subprocess.run(
            aiops_cmd("actions", "approve", cap, "--key", str(keys.keys["alice"]), "--db", str(db)),
            capture_output=True,
            text=True,
            timeout=120,
            env=service_env(tmp_path),
        )
        assert approved.returncode == 0, approved.stderr

        def executed_at() -> float | None:
            rows = _read(
                db, "SELECT data_ts_s FROM executions WHERE proposal_id = ? AND status = 'executed'", [cap]
            )
            return float(rows[0]["data_ts_s"]) if rows and rows[0]["data_ts_s"] is not None else None

        set_ts_s = wait_for(executed_at, 120, "the service to execute the approved cap")
        newest = "SELECT max(ts_s) AS t FROM gpu_samples"
        wait_for(lambda: float(_read(db, newest)[0]["t"]) >= set_ts_s + QUIET_S, 240, "150 simulated seconds")

        incidents = get_json(f"{api}/incidents")["incidents"]
        opened_since = [i for i in incidents if i["opened_ts_s"] >= set_ts_s - 10]
        assert not [i for i in opened_since if any(_node6(c) for c in i["components"])], opened_since
        for i in incidents:
            detail = get_json(f"{api}/incidents/{i['incident_id']}")
            assert "power_limit_drop" not in {s["kind"] for s in detail["symptoms"]}, i["title"]
            assert "power_cap_misconfig" not in {h["root_cause"] for h in detail["hypotheses"][:1]}, i[
                "title"
            ]
        proposals = get_json(f"{api}/proposals")["proposals"]
        undo = [
            p
            for p in proposals
            if _node6(p["target"])
            and (
                p["kind"] == "reset_power_limit"
                or (p["kind"] == "set_power_limit" and float(p["parameters"].get("power_limit_w", 0)) > 550.0)
            )
        ]
        assert not undo, undo
        assert {p["status"] for p in proposals if p["proposal_id"] == cap} == {"executed"}

        hand_set_power_limit(db, "node6/gpu3", 400.0)

        def caught() -> dict[str, Any] | None:
            for i in get_json(f"{api}/incidents")["incidents"]:
                detail = get_json(f"{api}/incidents/{i['incident_id']}")
                drops = [
                    s
                    for s in detail["symptoms"]
                    if s["kind"] == "power_limit_drop" and s["component"] == "node6/gpu3"
                ]
                if drops and detail["hypotheses"]:
                    return {"incident": detail, "drop": drops[0]}
            return None

        found = wait_for(caught, 180, "the hand-set limit on node6/gpu3 to be caught")
        assert found["drop"]["detail"]["intended_w"] == 550.0 and found["drop"]["detail"]["set_by"] == cap
        top = found["incident"]["hypotheses"][0]
        assert (top["root_cause"], top["component"]) == ("power_cap_misconfig", "node6/gpu3")

        def remedy() -> list[dict[str, Any]]:
            incident_id = found["incident"]["incident_id"]
            return [
                p
                for p in get_json(f"{api}/proposals")["proposals"]
                if p["incident_id"] == incident_id and p["kind"] in ("set_power_limit", "reset_power_limit")
            ]

        restored = wait_for(remedy, 60, "the remedy of the hand change")
        assert [(p["kind"], p["target"], p["parameters"]) for p in restored] == [
            ("set_power_limit", "node6/gpu3", {"power_limit_w": 550.0})
        ]

        def outcome() -> list[dict[str, Any]]:
            return [o for o in _read(db, "SELECT * FROM action_outcomes WHERE proposal_id = ?", [cap])]

        judged = wait_for(outcome, 120, "the cap's outcome once its window passed")
        assert judged[0]["check"] == "temp_below_slowdown" and judged[0]["verdict"] in ("worked", "failed")
        thermal = get_json(f"{api}/incidents/{judged[0]['incident_id']}")
        assert [o["proposal_id"] for o in thermal["outcomes"]] == [cap]
