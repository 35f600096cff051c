"""`aiops fleet-view` against two real shard listeners, one of them with its workspace held by its flush
(aiops/fleet/view.py; docs/BENCHMARKS.md, round eleven: the view got no answer from any shard, whose flushes held
their workspaces for minutes after a site power cap). A shard with nothing read before answers 503-busy and is
shown as busy, since when, not as silent; one that was asked before answers from that read and is shown stale
with when it was read; the view answers within seconds; and the cap both shards see is still shown once, with the
first shard's plan only."""

from __future__ import annotations

import time
from pathlib import Path

from aiops.fleet.view import ask_shards, merge, render_html
from aiops.service.api import Api
from aiops.service.kept_answers import BUSY_WAIT_S
from aiops.store import Workspace
from tests.http_listener.test_proposal_list_bounded import EVERY, _flushing, _owned, _served, _workspace


def test_fleet_view_shows_a_busy_shard_as_busy_and_a_stale_one_with_its_read_time_and_the_cap_once(
    tmp_path: Path,
) -> None:
    path_a = _workspace(tmp_path / "a.duckdb", "a")
    path_b = _workspace(tmp_path / "b.duckdb", "b", cap_opened_ts_s=1010.0)
    with (
        _served(Api(Workspace(path_a))) as url_a,
        _owned(path_b) as (owner_b, api_b),
        _served(api_b) as url_b,
    ):
        shards = {"a": url_a, "b": url_b}
        with _flushing(owner_b) as hold_began_ts_s:  # b never asked before: nothing to answer from
            started = time.monotonic()
            busy_view = merge(ask_shards(shards, None, 30.0))
            busy_wall_s = time.monotonic() - started
        fresh_b = ask_shards(shards, None, 30.0)[1]  # b asked once, as fleet-view asks
        with _flushing(owner_b):
            stale_view = merge(ask_shards(shards, None, 30.0))
    assert busy_wall_s < 2 * BUSY_WAIT_S + 2.0, busy_wall_s  # b's two lists, each answered within its wait
    a, b = busy_view["shards"]
    assert (a["ok"], a["busy"], a["stale"], a["proposals"], a["proposals_total"]) == (
        True,
        [],
        False,
        200,
        EVERY,
    )
    assert (b["ok"], b["error"], b["busy"]) == (False, "", ["incidents", "proposals"])
    assert abs(b["busy_since_ts_s"] - hold_began_ts_s) < 1.0
    page = render_html(busy_view)
    assert "busy (incidents, proposals): its flush has held its workspace since" in page
    assert not fresh_b.busy and not fresh_b.stale
    a, b = stale_view["shards"]
    assert (b["ok"], b["busy"], b["stale"]) == (True, [], True) and b["as_of_ts_s"] == fresh_b.as_of_ts_s
    assert "stale: as of " in render_html(stale_view)
    # the cap both shards see: once, under shard a's id (opened first), and shard b's plan for it not again
    caps = [i for i in stale_view["incidents"] if i["top_hypothesis"]["root_cause"] == "facility_power_cap"]
    assert len(caps) == 1 and [s["shard"] for s in caps[0]["seen_by"]] == ["a", "b"]
    assert {p["shard"] for p in stale_view["proposals"]} == {"a"} and len(stale_view["proposals"]) == 200
