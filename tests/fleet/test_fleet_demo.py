"""`make fleet-demo` as a person runs it (scripts/fleet_demo.py): it comes up on loopback (the node agents and the
facility agent scraped by a real Prometheus holding the chart's alert rules, a real Alertmanager, the fleet's
console), refuses a second demo on its running folder, and `make fleet-demo-stop` (`--stop`) stops it: exit 0,
every process it started gone. The fault, the diagnosis and the plan take minutes: `FLEET_DEMO_S=240 make
fleet-demo` shows them (docs/FLEET.md); this test stops at "it runs"."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.service_helpers import get, get_json, require_binary, wait_for

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "fleet_demo.py"


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_fleet_demo_comes_up_and_stops(tmp_path: Path) -> None:
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    folder = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_", "FLEET_DEMO_"))}
    demo = subprocess.Popen(  # one node agent: the path is the same for four (`make fleet-demo`), and cheaper
        [sys.executable, str(SCRIPT), "--out", str(folder), "--nodes", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(demo.stdout or ()), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while not any(line.startswith("  workspace") for line in lines):
            assert demo.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
            time.sleep(0.2)
        text = "".join(lines)
        console = re.search(r"console\s+(http://127\.0\.0\.1:\d+)/\s+sign in as oncall, password (\S+)", text)
        prom = re.search(r"prometheus\s+(http://127\.0\.0\.1:\d+)/", text)
        am = re.search(r"alertmanager\s+(http://127\.0\.0\.1:\d+)/", text)
        assert console and prom and am, text
        state = json.loads((folder / "demo.json").read_text())  # scripts/fleet_demo_browser.py reads it
        assert (state["console_url"], state["user"], state["pid"]) == (console[1], "oncall", demo.pid)
        assert get(console[1] + "/healthz")[0] == 200
        assert get(am[1] + "/-/ready")[0] == 200
        groups = get_json(prom[1] + "/api/v1/rules")["data"]["groups"]
        assert any(r["name"] == "AiopsIncidentOpen" for g in groups for r in g["rules"]), (
            groups
        )  # the chart's
        jobs = {"aiops-node": 2, "aiops-fleet": 1}  # the node agent and the facility agent; the fleet

        def scraped() -> bool:
            targets = get_json(prom[1] + "/api/v1/targets")["data"]["activeTargets"]
            found = [t["labels"]["job"] for t in targets]
            return {j: found.count(j) for j in set(found)} == jobs

        wait_for(scraped, 30, "Prometheus to read the demo's target files")
        status, _ = get(console[1] + "/login")
        assert status == 200
        started = _children(demo.pid)
        assert len(started) == 5, started  # alertmanager, prometheus, two agents, the fleet

        second = subprocess.run(
            [sys.executable, str(SCRIPT), "--out", str(folder)], capture_output=True, text=True, env=env
        )
        assert second.returncode == 2 and "a fleet demo runs there" in second.stderr, second
        assert (folder / "fleet-demo.json").is_file()  # the running demo's folder was left alone

        stop = subprocess.run(
            [sys.executable, str(SCRIPT), "--stop", "--out", str(folder)],
            capture_output=True,
            text=True,
            env=env,
            timeout=150,
        )
        assert stop.returncode == 0 and "stopped the fleet demo" in stop.stdout, stop
        assert demo.wait(timeout=10) == 0, "".join(lines)[-3000:]
        assert not [pid for pid in started if _alive(pid)]
        with pytest.raises(OSError):  # nothing listens there any more
            get(console[1] + "/healthz", 1)
        assert (folder / "fleet.duckdb").is_file()
    finally:
        if demo.poll() is None:
            demo.terminate()
            demo.wait(timeout=150)


def test_fleet_demo_refuses_a_folder_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("someone's files\n")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert "not empty and not an earlier fleet demo's folder" in done.stderr, done.stderr
    assert (tmp_path / "notes.txt").read_text() == "someone's files\n"
