"""Every shard at once (issue 40 item 4; bench/fleet.py `--all-at-once`, bench/fleet_shards.py): three real
`aiops fleet` shards of one rack each (128 GPUs a shard), side by side against one real VictoriaMetrics, all
knowing each other (`[fleet] shards`), on the bench's clock (here faster than the wall: a 15 s step every 4.5 s),
with one hot GPU in the middle shard and a site-wide DCIM cap that every shard sees. `aiops fleet-view` across the
three shows the hot GPU's incident once and the site's cap once (seen by all three), and the loopback webhook
every shard pages to got exactly one page for each: the cap's from one shard, the others naming its incident."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.service_helpers import require_binary

BENCH = Path(__file__).resolve().parents[2] / "bench" / "fleet.py"


def test_three_shards_at_once_show_and_page_each_condition_once() -> None:
    require_binary("victoria-metrics")
    args = ["--gpus", "384", "--shards", "3", "--all-at-once", "--pace", "0.3"]
    # seven cycles, the fewest bench/fleet.py allows with the fault at the third (the cap's incident must open
    # before the hot GPU's, which a fault at the first cycle does not leave time for: the two join)
    args += ["--lookback-s", "60", "--cycles", "7", "--fault-cycle", "3", "--delay-s", "5"]
    done = subprocess.run(
        [sys.executable, str(BENCH), *args], capture_output=True, text=True, timeout=400, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run = json.loads(done.stdout)["gpus"]["384"]
    targets = run["targets"]
    assert [r["shard"] for r in run["per_shard"]] == ["a", "b", "c"]
    assert all(r["cores"] is not None and r["peak_rss_mb"] > 0 for r in run["per_shard"]), run["per_shard"]
    assert run["store"]["cores"] is not None and run["rss_sum_mb_peak_sampled"] > 0
    # the hot GPU: found by its own shard (b), diagnosed, shown once across the three, paged once
    assert run["fault"]["shard"] == "b" and run["fault"]["top"] == ["thermal_throttle", run["fault"]["gpu"]]
    assert targets["hot_gpu_shown_once"] and targets["hot_gpu_paged_once"], run["view"]
    # the site's cap: every shard names it, the view shows it once, seen by all three; one page between them
    assert run["view"]["shards_ok"] == [True, True, True]
    assert run["view"]["cap_seen_by"] == ["a", "b", "c"], run["view"]
    assert targets["cap_shown_once_seen_by_all"], run["view"]
    decisions = run["cap"]["settle"]["cap"]
    assert sorted(decisions) == ["a", "b", "c"], decisions
    assert run["pages"]["cap"] == 1, run["pages"]
    assert targets["cap_paged_once"] and run["pages"]["sent"] == 2, run["pages"]
    assert targets["nothing_else"], (run["view"], run["pages"])
    paged = [d for d in decisions.values() if d["paging"]["paged_ts_s"] is not None]
    assert len(paged) == 1, decisions
    assert all(
        d["paging"]["reason"] == "elsewhere" and d["paging"]["covered_by"] == paged[0]["incident"]
        for d in decisions.values()
        if d is not paged[0]
    ), decisions
    # what the view and the shards' asking each other cost is measured
    assert run["view"]["requests"] == 6 and run["view"]["bytes"] > 0
    assert run["peers"]["requests_per_window"] == 6 and run["peers"]["bytes_per_window"] > 0


def test_a_shard_reads_only_its_own_racks_facility_series() -> None:
    """`[fleet] selector` reaches the facility exporters' series too (aiops/fleet/cycle.py): a shard of a rack set
    reads its racks' sensors, not every rack's (before, every shard read every rack's sensors, and each shard's
    topology and its site cap's incident held every rack of the site)."""
    from aiops.config import FacilityConfig
    from aiops.sources.facility import selector

    inlet = FacilityConfig().inlet_temp_c
    assert selector(inlet, 'shard="3"') == selector(inlet)[:-1] + ',shard="3"}'
    assert "shard" not in selector(inlet)
