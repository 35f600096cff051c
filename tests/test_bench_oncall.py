"""Issue 34 item 8 and issue 35 item 5: bench/oncall.py, the operator's day, at its `--quick` size (2 nodes of the
twin carrying one job, 4 simulated minutes, a hot GPU on one node and a misconfigured power limit on the other):
real node agents and fleet, a real VictoriaMetrics between them, the fleet paging a loopback PagerDuty, an on-call
approving each plan step with one real SSH signature. The JSON carries every figure of the contract
(docs/BENCHMARKS.md), per fault and in total, and they hold together: each fault paged once (one page per
problem), a step took one signature, the misconfigured limit was reset by the step approved, and ETTR with no
product is below the oracle's."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service_helpers import require_binary

BENCH = Path(__file__).resolve().parent.parent / "bench" / "oncall.py"
QUIET_ARGS = ("--quiet-node-days", "0.02", "--quiet-racks", "1")
PER_FAULT = (
    "kind",
    "target",
    "pages",
    "signatures",
    "steps",
    "gpus_touched",
    "gpus_affected",
    "self_inflicted",
    "undo_proposals",
    "mttm_s",
    "mttr_s",
)
TOTAL = (
    "pages_per_fault",
    "signatures_median",
    "gpus_touched",
    "gpus_affected",
    "touched_over_affected",
    "self_inflicted",
    "undo_proposals",
    "mttm_s_median",
    "mttr_s_median",
    "false_pages_per_1000_node_days",
    "false_actionable_per_1000_node_days",
    "ettr",
    "blind",
)
GOALS = (
    "signatures_per_fault",
    "gpus_touched",
    "self_inflicted",
    "undo_proposals",
    "ettr",
    "pages_per_real_fault",
    "false_pages",
    "false_actionable_proposals",
    "node_days_measured",
    "blind",
)


@pytest.fixture(scope="module")
def bench_run() -> subprocess.CompletedProcess[str]:
    """One bench process for both tests (its start and imports once): the quick day, then the short false-alarm
    run (`main` runs the day, then the quiet run, into one JSON object)."""
    require_binary("victoria-metrics")
    require_binary("ssh-keygen")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick", *QUIET_ARGS],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_the_quick_operators_day_reports_every_figure(bench_run: subprocess.CompletedProcess[str]) -> None:
    done = bench_run
    result = json.loads(done.stdout)
    day = result["day"]
    assert day["cluster"] == {"nodes": 2, "gpus": 16, "hours": 0.07, "scrape_s": 15.0, "seed": 2027}
    assert result["page_from"] == "fleet"
    total, faults = day["total"], day["faults"]
    assert set(TOTAL) <= set(total) and all(set(PER_FAULT) <= set(f) for f in faults)
    assert [f["kind"] for f in faults] == ["thermal_throttle", "power_cap_misconfig"]
    # one page per problem: each fault reached PagerDuty once, nothing else paged
    assert [f["pages"] for f in faults] == [1, 1], day["pages"]
    assert total["pages"] == len(day["pages"]) == 2 and total["false_pages"] == 0
    # one signature per fault: the fleet's incident of the hot GPU gathered the wrong limit on the other node and
    # was re-diagnosed as it; the hot GPU's plan stayed open (another fault's) and its cap was signed and ran on
    # that GPU alone; the reset of the wrong limit, approved once, executed, and the limit is back
    assert [f["signatures"] for f in faults] == [1, 1] and faults[0]["gpus_touched"] == 1
    assert faults[1]["steps"] >= 1 and faults[1]["gpus_touched"] == 1
    assert all(f["timeline"]["signed_after_s"] >= f["timeline"]["paged_after_s"] for f in faults)
    assert faults[1]["mttr_s"] is not None and faults[1]["mttr_s"] < 120
    assert total["executed"] >= 1 and [f["gpus_affected"] for f in faults] == [1, 1]
    assert total["self_inflicted"] == 0 and total["undo_proposals"] == 0
    # the hot GPU holds until a ticket's repair (hours away): it is not recovered in 4 minutes
    assert faults[0]["mttr_s"] is None and faults[0]["nature"] == "repair"
    ettr = total["ettr"]
    assert 0 < ettr["none"] < ettr["oracle"] <= 1.01 and 0 < ettr["product"] <= 1.01
    assert ettr["product_over_oracle"] == round(ettr["product"] / ettr["oracle"], 4)
    assert set(GOALS) == set(result["goals"])
    assert all(g["met"] in (True, False, None) for g in result["goals"].values())
    # the day's state is kept beside its workspaces: the figures come out the same again from it
    folder = re.findall(r"the day's workspaces and state: (\S+)", done.stderr)[-1]
    again = subprocess.run(
        [sys.executable, str(BENCH), "--refigure", folder],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    refigured = json.loads(again.stdout)["day"]
    assert {**refigured, "wall_s": None} == {**day, "wall_s": None}
    shutil.rmtree(folder)


def test_a_short_false_alarm_run_counts_pages_and_proposals_per_node_day(
    bench_run: subprocess.CompletedProcess[str],
) -> None:
    """The false-alarm run's path at its smallest: one rack of 8 nodes for 225 simulated seconds (15 scrapes),
    the fleet's service on the twin's scrape-interval rows, pages counted at the loopback PagerDuty. What is
    checked is the path and its arithmetic (counts per node-day of that run, whatever they are): 15 minutes of
    the same rack paged nothing and proposed nothing either, and cost 3 times the CPU (about 0.1 CPU-s a scrape)."""
    result = json.loads(bench_run.stdout)
    quiet = result["quiet"]
    assert quiet["nodes"] == 8 and quiet["scrape_s"] == 15.0 and quiet["simulated_days"] == 0.003
    assert quiet["node_days"] == 0.02 and quiet["wall_s"] > 0
    per_1000 = 1000.0 / (8 * 225 / 86_400)  # 0.02 node-days of 8 nodes on the 15 s grid: 225 s
    assert quiet["false_pages_per_1000_node_days"] == round(quiet["pages"] * per_1000, 2)
    assert quiet["false_actionable_per_1000_node_days"] == round(quiet["false_actionable"] * per_1000, 2)
    assert quiet["false_actionable"] <= quiet["proposals"]
    assert quiet["cpu_s_per_node_day"] == round(quiet["cpu_s"] / 0.02, 2)
    assert result["goals"]["node_days_measured"] == {"goal": ">= 1,000", "value": 0.02, "met": False}
    shutil.rmtree(quiet["workspace"])
