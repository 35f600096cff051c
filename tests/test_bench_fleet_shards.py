"""bench/fleet.py --shards: the synthetic exports split into shards of whole racks, every series carrying the
`shard` target label of its node (a series without one would be read by no shard's `[fleet] selector`, one with
another node's would be read by the wrong shard). The selector's effect on a real VictoriaMetrics is the bench's
own `nodes_seen` figure (docs/BENCHMARKS.md)."""

from __future__ import annotations

import re

import pytest

from bench.fleet_exports import NODES_PER_RACK, build, host, rack

LINE = re.compile(r"^(\w+)\{(.*)\} \S+ \d+$")


def test_every_series_carries_the_shard_of_its_node() -> None:
    exports = build(2 * NODES_PER_RACK * 8, 15.0, 0.0, 150.0, shards=2)
    per_shard: dict[str, set[str]] = {"0": set(), "1": set()}
    lines = exports.scrape(10).splitlines()
    assert len(lines) == exports.series
    for line in lines:
        match = LINE.match(line)
        assert match, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
        node = int(labels["instance"].split(":")[0].rsplit("-", 1)[1]) - 1
        assert labels["shard"] == str(node // NODES_PER_RACK), line
        per_shard[labels["shard"]].add(labels["instance"])
        if "rack" in labels:  # a shard is whole racks
            assert labels["rack"] == rack(node)
    assert [len(nodes) for nodes in per_shard.values()] == [NODES_PER_RACK, NODES_PER_RACK]
    assert f"{host(NODES_PER_RACK)}:9484" in per_shard["1"]


def test_a_shard_of_part_of_a_rack_is_refused() -> None:
    with pytest.raises(ValueError, match="whole racks"):
        build(NODES_PER_RACK * 8, 15.0, 0.0, 150.0, shards=2)
