"""Issue 35 item 4, a lost node agent counted step by step against a real Prometheus (the node agents' exports and
Prometheus's own `up`, bulk-imported with promtool so every step is known; aiops/fleet/sight.py `NodePresence`):

- node `b`'s agent stops after its third scrape while Prometheus goes on scraping its target (`up` 0): lost at
  the second scraping step without it, its last-seen time that third scrape, the reason `up == 0`, its GPUs named;
  a step in which Prometheus scraped no one at all (it was down itself) counts for no one;
- read in several reads (the fleet's cycles) the answer is the same;
- `b` reports again: cleared. A node missed once is neither raised nor cleared.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiops.fleet.sight import NodePresence
from aiops.sources.prometheus import PrometheusClient
from aiops.store.conditions import NODE_AGENT_LOST
from tests.prometheus_process import backfilled

T0 = 1_767_225_600.0
STEP_S = 15.0
STEPS = 12  # scrapes 0..11
B_UNTIL = 3  # b's agent answers scrapes 0..3, not 4..8, again from 9 on
BLACKOUT = 5  # Prometheus itself scraped no one at scrape 5 (no sample of anyone)


def _exposition() -> str:
    lines = ["# TYPE aiops_node_info gauge"]
    for k in range(STEPS):
        if k == BLACKOUT:
            continue
        t = T0 + STEP_S * k
        for node in ("a", "b"):
            if node == "b" and B_UNTIL < k < 9:
                continue
            lines.append(
                f'aiops_node_info{{node="{node}",rack="rack0",instance="10.0.0.{ord(node)}:9484"}} 1 {t}'
            )
    lines.append("# TYPE up gauge")
    for k in range(STEPS):
        if k == BLACKOUT:
            continue
        t = T0 + STEP_S * k
        for node in ("a", "b"):
            value = 0 if node == "b" and B_UNTIL < k < 9 else 1
            lines.append(f'up{{job="aiops",instance="10.0.0.{ord(node)}:9484"}} {value} {t}')
    return "\n".join([*lines, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled(tmp_path_factory.mktemp("presence"), _exposition()) as url:
        yield url


def at(k: int) -> float:
    return T0 + STEP_S * k


@pytest.mark.parametrize("reads", [[(1, 11)], [(1, 4), (5, 6), (7, 7), (8, 11)]])
def test_a_node_silent_for_two_scraping_steps_is_lost_then_back(
    prometheus: str, reads: list[tuple[int, int]]
) -> None:
    client = PrometheusClient(prometheus)
    presence = NodePresence(STEP_S)
    presence.seed({"a": at(0), "b": at(0)})
    parts = {"b": {"gpu": 8, "nic": 2}}
    reports = {}
    for first, last in reads:
        presence.read(client, at(first), at(last))
        reports[last] = presence.report(parts)
        if last == 7:  # steps 4 and 6 missed (5: nobody was scraped): lost at 6, whatever the reads
            lost = reports[7].raised
            assert [(c.kind, c.component) for c in lost] == [(NODE_AGENT_LOST, "b")]
            assert lost[0].since_ts_s == at(B_UNTIL) and lost[0].stated_ts_s == at(6)
            assert "up == 0 at 10.0.0.98:9484" in lost[0].reason and "8 GPUs and 2 NICs" in lost[0].reason
    if len(reads) > 1:
        assert reports[4].raised == [] and (NODE_AGENT_LOST, "b") not in reports[4].cleared  # missed once
    final = reports[11]
    assert final.raised == [] and {(NODE_AGENT_LOST, "a"), (NODE_AGENT_LOST, "b")} <= final.cleared
    if len(reads) == 1:  # one read over all of it: b lost and back within it, cleared
        assert presence.nodes["b"].last_seen_ts_s == at(11)
