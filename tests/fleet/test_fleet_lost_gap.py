"""Issue 35 item 4, no false `node_agent_lost` from steps the store itself did not have (aiops/fleet/sight.py
`NodePresence`), against a real Prometheus holding the agents' exports and its own `up` (bulk-imported with
promtool, so every step is fixed), read step by step as the fleet reads at a 1 s step:

- Prometheus is down for steps 5..9 (no sample of anyone) and restarts; it scrapes a, c and d again from step
  10 but b's target only from step 13 (its first scrapes spread over the interval, later under load): b's
  series are absent at 10..12 and so is any `up` of its target. Not lost (it was lost at step 11 before: two
  steps holding others' samples and not b's). Later two of b's scrapes land late (steps 20 and 21 hold no sample
  of its target, neither its series nor its `up`): not lost either. b is never raised and ends cleared.
- What must still page: c's agent killed after step 15 while Prometheus goes on scraping its target (`up` 0):
  lost at its second missed step (17), the reason `up == 0`; and d's target removed from the scraper after step
  14 (no `up` any more): lost once the store has scraped others without it for the blind grace (10 s: step 24),
  the reason saying its target is no longer scraped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiops.fleet.sight import GONE_AFTER_S, NodePresence
from aiops.sources.prometheus import PrometheusClient
from aiops.store.conditions import NODE_AGENT_LOST
from tests.prometheus_process import backfilled

T0 = 1_767_225_600.0
STEP_S = 1.0
STEPS = 30  # scrapes 0..29
DOWN = range(5, 10)  # Prometheus itself down: no sample of anyone
B_UNSCRAPED = {10, 11, 12, 20, 21}  # steps holding no scrape of b's target (after the restart; two late ones)
C_KILLED_AFTER = 15  # c's agent killed: its target scraped, `up` 0
D_REMOVED_AFTER = 14  # d's target no longer scraped: no `up`, no series


def _instance(node: str) -> str:
    return f"10.0.0.{ord(node)}:9484"


def _scrape(node: str, k: int) -> int | None:
    """The `up` the store holds for `node`'s target at step k, None when it holds no scrape of it."""
    if k in DOWN or (node == "b" and k in B_UNSCRAPED) or (node == "d" and k > D_REMOVED_AFTER):
        return None
    return 0 if node == "c" and k > C_KILLED_AFTER else 1


def _exposition() -> str:
    info, up = ["# TYPE aiops_node_info gauge"], ["# TYPE up gauge"]
    for k in range(STEPS):
        t = T0 + STEP_S * k
        for node in "abcd":
            value = _scrape(node, k)
            if value is None:
                continue
            up.append(f'up{{job="aiops",instance="{_instance(node)}"}} {value} {t}')
            if value:
                info.append(
                    f'aiops_node_info{{node="{node}",rack="rack0",instance="{_instance(node)}"}} 1 {t}'
                )
    return "\n".join([*info, *up, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled(tmp_path_factory.mktemp("lost-gap"), _exposition()) as url:
        yield url


def at(k: int) -> float:
    return T0 + STEP_S * k


def test_steps_the_store_did_not_have_lose_no_agent_a_killed_or_removed_one_still_is(prometheus: str) -> None:
    client = PrometheusClient(prometheus)
    presence = NodePresence(STEP_S)
    presence.seed({node: at(0) for node in "abcd"})
    parts = {node: {"gpu": 2, "nic": 1} for node in "abcd"}
    raised_at: dict[str, int] = {}
    last = None
    for k in range(1, STEPS):  # one read a step, as the fleet reads
        presence.read(client, at(k), at(k))
        last = presence.report(parts)
        for condition in last.raised:
            assert condition.kind == NODE_AGENT_LOST
            raised_at.setdefault(condition.component, k)
    assert last is not None
    assert "b" not in raised_at, f"b lost at step {raised_at.get('b')}: steps the store did not have counted"
    assert (NODE_AGENT_LOST, "b") in last.cleared and (NODE_AGENT_LOST, "a") in last.cleared
    assert raised_at.get("c") == C_KILLED_AFTER + 2, raised_at
    gone_at = D_REMOVED_AFTER + round(GONE_AFTER_S / STEP_S)  # the store scraped others for the grace
    assert raised_at.get("d") == gone_at, raised_at
    lost = {c.component: c for c in last.raised}
    assert set(lost) == {"c", "d"}
    assert lost["c"].stated_ts_s == at(C_KILLED_AFTER + 2) and lost["c"].since_ts_s == at(C_KILLED_AFTER)
    assert f"up == 0 at {_instance('c')}" in lost["c"].reason and "2 GPUs and 1 NIC" in lost["c"].reason
    assert lost["d"].stated_ts_s == at(gone_at) and lost["d"].since_ts_s == at(D_REMOVED_AFTER)
    assert f"its target {_instance('d')} is no longer scraped" in lost["d"].reason
