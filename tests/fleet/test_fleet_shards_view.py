"""Two real shards and one view across them (issue 40 item 4; docs/FLEET.md "One view across shards"): a twin run
of two racks (one node each) whose site the DCIM caps, replayed as the node agents would have exported it, every
series with the `shard` target label of its rack (`a`: rack0, `b`: rack1), bulk-imported into a real Prometheus.
The run is placed so that its cap falls a few seconds after the shards start (samples after now are served once
now passes them, as scrapes would be), and the DCIM document both shards read (`[facility] dcim`) already asks
for the cap, as a DCIM does before the limits come down. Two `aiops fleet` processes read it, one per shard
(`[fleet] selector` and `shard`); each names the site's cap in its own workspace with its own id
(`INC-fleet-a-…`, `INC-fleet-b-…`). `aiops fleet-view` then asks both shards' /api and shows it once, with one
id (the shard that opened it first), and nothing else twice. Then their store goes down: both shards go blind at
once, and that pages once too."""

from __future__ import annotations

import io
import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from aiops.control.dcim_source import dcim_document
from aiops.fleet.backfill import backfill, serving
from aiops.fleet.history import replay, write
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import load_scenario
from aiops.sources.facility import facility_rows, render_facility_history
from aiops.store import Store
from tests.agent_cluster import stop
from tests.service_helpers import (
    aiops_cmd,
    free_port,
    get,
    get_json,
    listening_ports,
    require_binary,
    service_env,
    wait_for,
)

STEP_S = 5.0  # the scrape interval and the shards' step
CAP_AT_S = 100.0  # in the run
LEAD_S = 12.0  # wall seconds from writing the history to the cap: Prometheus starts, each shard reads it once
SCENARIO = f"""\
name: shards-site-cap
seed: 3
duration_s: 160
cluster: {{racks: 2, nodes_per_rack: 1, gpus_per_node: 2, nics_per_node: 1}}
faults:
  - {{kind: facility_power_cap, target: fleet, start_s: {CAP_AT_S:g}, severity: 0.8}}
"""
SHARD_OF_NODE = {"node0": "a", "node1": "b"}  # whole racks: rack0 holds node0, rack1 node1
SAMPLE = re.compile(r"^(\w+)\{(.*)\} (\S+) (\S+)$")
NODE = re.compile(r'="(node\d+)[/"]')
RACK = re.compile(r'rack="(rack\d+)"')
SHARD_OF_RACK = {"rack0": "a", "rack1": "b"}


def recorded_run(work: Path) -> tuple[list[str], float, dict[str, Any]]:
    """The twin run's exports and rack sensors as OpenMetrics lines, its first sample's time and the DCIM
    document of its cap."""
    scenario = work / "scenario.yaml"
    scenario.write_text(SCENARIO)
    text = io.StringIO()
    with Store(":memory:") as twin:
        simulate_into(twin, load_scenario(str(scenario)))
        write(replay(twin, STEP_S), text, openmetrics=True, end=False)
        render_facility_history(facility_rows(twin), text, step_s=STEP_S, openmetrics=True)
        first_s = float(twin.scalar("SELECT min(ts_s) FROM gpu_samples"))
        document = dcim_document(twin, first_s + CAP_AT_S + STEP_S)
    return text.getvalue().splitlines(), first_s, document


def write_sharded(lines: list[str], first_s: float, out: Path, cap_ts_s: float) -> None:
    """The run moved so that its cap falls at `cap_ts_s`, each series with its node's (or rack's) shard."""
    shift_s = cap_ts_s - (first_s + CAP_AT_S)
    with out.open("w") as om:
        for line in lines:
            match = SAMPLE.match(line)
            if match is None:
                om.write("" if line == "# EOF" else line + "\n")
                continue
            name, labels, value, ts = match.groups()
            # every series an agent exports names its node (node, gpu or nic); a rack sensor its rack
            node, rack = NODE.search(labels), RACK.search(labels)
            assert node or rack, f"a series without its node or rack: {line}"
            shard = SHARD_OF_NODE[node.group(1)] if node else SHARD_OF_RACK[rack.group(1) if rack else ""]
            om.write(f'{name}{{{labels},shard="{shard}"}} {value} {float(ts) + shift_s:.3f}\n')
        om.write("# EOF\n")


@contextmanager
def shard_fleet(
    home: Path, url: str, shard: str, work: Path, ports: dict[str, int]
) -> Iterator[subprocess.Popen[bytes]]:
    """One shard's `aiops fleet` (started, not yet ready: both shards start side by side), stopped after; it knows
    every shard (`[fleet] shards`), so a condition they all see pages once between them."""
    home.mkdir()
    shards = ", ".join(f'{name} = "http://127.0.0.1:{port}"' for name, port in ports.items())
    (home / "aiops.toml").write_text(
        f'[fleet]\nshard = "{shard}"\nshards = {{{shards}}}\n[facility]\ndcim = "{work / "dcim.json"}"\n'
        f"[detection]\nwindow_s = {STEP_S:g}\n"
    )
    with (home / "fleet.log").open("ab") as log:
        proc = subprocess.Popen(
            aiops_cmd(
                "fleet",
                *(
                    "--db",
                    str(home / "fleet.duckdb"),
                    "--listen",
                    f"127.0.0.1:{ports[shard]}",
                    "--prometheus",
                    url,
                ),
                *(
                    "--selector",
                    f'shard="{shard}"',
                    "--step",
                    f"{STEP_S:g}s",
                    "--delay",
                    "1s",
                    "--lookback",
                    "1m",
                ),
            ),
            stdout=log,
            stderr=log,
            env=service_env(home),
        )
    try:
        yield proc
    finally:
        stop(proc)


def listening(proc: subprocess.Popen[bytes], home: Path) -> int:
    def bound() -> int | None:
        assert proc.poll() is None, (home / "fleet.log").read_text()[-3000:]
        ports = listening_ports(proc.pid)
        return min(ports) if ports else None

    return int(wait_for(bound, 60, f"{home.name}'s fleet to listen", interval_s=0.1))


def diagnosed(port: int) -> list[dict[str, Any]]:
    found = get_json(f"http://127.0.0.1:{port}/api/incidents")["incidents"]
    return [i for i in found if i.get("top_hypothesis")]


def cap_pages(ports: dict[str, int]) -> list[dict[str, Any]] | None:
    """Both shards' incidents of the site's cap once each has settled its page (paged, or deferred to another
    shard's incident), else None."""
    caps = [
        i
        for port in ports.values()
        for i in diagnosed(port)
        if (i["top_hypothesis"]["root_cause"], i["top_hypothesis"]["component"])
        == ("facility_power_cap", "fleet")
        and i["status"] == "open"
    ]
    settled = [
        i
        for i in caps
        if (i.get("paging") or {}).get("paged_ts_s") is not None
        or (i.get("paging") or {}).get("reason") == "elsewhere"
    ]
    return caps if len(caps) == 2 and len(settled) == 2 else None


def blind_pages(ports: dict[str, int]) -> list[dict[str, Any]] | None:
    """Both shards' open `source_blind` incidents once each has settled its page, else None."""
    blind = [
        i
        for port in ports.values()
        for i in get_json(f"http://127.0.0.1:{port}/api/incidents?status=open")["incidents"]
        if i.get("condition") == "source_blind"
    ]
    settled = [
        i
        for i in blind
        if (i.get("paging") or {}).get("paged_ts_s") is not None
        or (i.get("paging") or {}).get("reason") == "elsewhere"
    ]
    return blind if len(blind) == 2 and len(settled) == 2 else None


def test_two_shards_and_one_view_that_names_a_site_condition_once(tmp_path: Path) -> None:
    require_binary("prometheus")
    require_binary("promtool")
    lines, first_s, document = recorded_run(tmp_path)
    assert list(document) == ["fleet"], document
    (tmp_path / "dcim.json").write_text(json.dumps(document))
    prometheus_port = free_port()
    url = f"http://127.0.0.1:{prometheus_port}"
    with ExitStack() as stack:
        # the shards first (their start is the slow part), pointed at the Prometheus about to serve the run:
        # each says its source is blind until it answers
        given = {shard: free_port() for shard in "ab"}
        procs = {
            shard: stack.enter_context(shard_fleet(tmp_path / shard, url, shard, tmp_path, given))
            for shard in "ab"
        }
        ports = {shard: listening(proc, tmp_path / shard) for shard, proc in procs.items()}
        cap_ts_s = time.time() + LEAD_S
        write_sharded(lines, first_s, tmp_path / "history.om", cap_ts_s)
        backfill(tmp_path / "history.om", tmp_path / "tsdb")
        source = stack.enter_context(ExitStack())  # the store, closed before the shards: they go blind
        source.enter_context(serving(tmp_path / "tsdb", tmp_path, port=prometheus_port))
        for port in ports.values():
            wait_for(
                lambda port=port: get(f"http://127.0.0.1:{port}/readyz", 2.0)[0] == 200, 60, "a shard ready"
            )
        # a shard reads the DCIM document at the end of each cycle: one that first read it after the limits came
        # down would rightly judge them a misconfiguration (what it knew then), so this run would show nothing
        late_s = time.time() - cap_ts_s
        assert late_s < 0, (
            f"the shards were ready {late_s:.1f} s after the cap fell: LEAD_S is too short here"
        )
        found = {
            shard: wait_for(lambda port=port: diagnosed(port), 90, f"shard {shard}'s diagnosis")
            for shard, port in ports.items()
        }
        for shard, incidents in found.items():
            assert all(i["incident_id"].startswith(f"INC-fleet-{shard}-") for i in incidents), incidents
        causes = {
            shard: {(i["top_hypothesis"]["root_cause"], i["top_hypothesis"]["component"]) for i in incidents}
            for shard, incidents in found.items()
        }
        shared = causes["a"] & causes["b"]
        assert ("facility_power_cap", "fleet") in shared, causes
        # pages once at the source: one shard pages the site's cap, the other says which shard's incident did
        paging = wait_for(lambda: cap_pages(ports), 40, "both shards to settle the cap's page")
        paged = [i for i in paging if i["paging"]["paged_ts_s"] is not None]
        assert len(paged) == 1, f"not one shard paged the site's cap: {paging}"
        deferred = next(i for i in paging if i is not paged[0])
        assert deferred["paging"]["reason"] == "elsewhere", paging
        assert deferred["paging"]["covered_by"] == paged[0]["incident_id"], paging
        shown = subprocess.run(
            aiops_cmd(
                "fleet-view",
                "--json",
                "--shard",
                f"a=http://127.0.0.1:{ports['a']}",
                "--shard",
                f"b=http://127.0.0.1:{ports['b']}",
            ),
            env=service_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        # then their one store goes down: both shards state `source_blind` on `fleet` in the same minute, and
        # that too pages once between them (aiops/fleet/peer_pages.py), the other naming the page
        source.close()
        blind = wait_for(lambda: blind_pages(ports), 90, "both shards to settle the blind store's page")
        paged_blind = [i for i in blind if i["paging"]["paged_ts_s"] is not None]
        assert len(paged_blind) == 1, f"not one shard paged the blind store: {blind}"
        other = next(i for i in blind if i is not paged_blind[0])
        assert other["paging"]["reason"] == "elsewhere", blind
        assert other["paging"]["covered_by"] == paged_blind[0]["incident_id"], blind
    view = json.loads(shown.stdout)
    assert [(s["shard"], s["ok"]) for s in view["shards"]] == [("a", True), ("b", True)]
    caps = [
        i
        for i in view["incidents"]
        if (i["top_hypothesis"] or {}).get("root_cause") == "facility_power_cap"
        and i["top_hypothesis"]["component"] == "fleet"
    ]
    assert len(caps) == 1, view["incidents"]
    assert sorted(s["shard"] for s in caps[0]["seen_by"]) == ["a", "b"]
    assert caps[0]["incident_id"] in {s["incident_id"] for s in caps[0]["seen_by"]}
    # and the view shows it: of the shards' decisions on the cap, one paged
    decisions = [caps[0]["paging"], *caps[0]["duplicate_pages"]]
    assert [bool(d and d.get("paged_ts_s") is not None) for d in decisions].count(True) == 1, (
        paging,
        decisions,
    )
    # nothing else is shown twice: every shard's incident appears once, as itself or under the one it joined
    listed = [s["incident_id"] for i in view["incidents"] for s in i["seen_by"]]
    assert len(listed) == len(set(listed)), listed
    assert {i["incident_id"] for incidents in found.values() for i in incidents} <= set(listed)
