"""`aiops lab net` end to end (short phases): the JSON contract, lanes protect VIP, nothing is left behind."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiops.lab.netns import CGROUP2_ROOT
from tests.ebpf.conftest import require_ebpf

pytestmark = pytest.mark.ebpf


def test_lab_net_json_and_cleanup() -> None:
    require_ebpf()
    done = subprocess.run(
        [sys.executable, "-m", "aiops.cli.main", "lab", "net", "--json", "--phase-s", "3"],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) == {"phases", "bottleneck_mbps"}
    assert set(result["phases"]) == {"alone", "no_lanes", "lanes"}
    for phase in result["phases"].values():
        assert set(phase) == {"vip_p50_ms", "vip_p99_ms", "vip_mbps", "bulk_mbps"}
    alone, no_lanes, with_lanes = (result["phases"][k] for k in ("alone", "no_lanes", "lanes"))
    # lanes protect VIP (loose here; docs/BENCHMARKS.md has targets): its median delay a third of what bulk in one
    # FIFO gives it or less, its rate as when alone. Not its tail: with 3-second phases a p99 is the few slowest of
    # ~100 probes, and on a loaded machine (the suite beside it) those are the VIP sender's late wake-ups, not the
    # queue: 77 ms against one FIFO's 189 once, 88 against 79 another time (fresh60, 2026-12-07), medians 2.8 and 27.
    # Its rate, too, is its sender's on a loaded machine: 20.3 Mbit/s with lanes against 22.8 alone once (fresh71),
    # and one FIFO's share swings with the flood's congestion window: 4.0 Mbit/s once, 13.2 on CI's runner (stop 53).
    # So the lanes phase keeps 80 % of the rate alone and more than one FIFO gives; the median delay is the sharp check
    assert with_lanes["vip_p50_ms"] < no_lanes["vip_p50_ms"] / 3, result
    assert with_lanes["vip_mbps"] > 0.8 * alone["vip_mbps"], result
    assert with_lanes["vip_mbps"] > no_lanes["vip_mbps"], result
    assert alone["vip_mbps"] > no_lanes["vip_mbps"], result
    assert with_lanes["bulk_mbps"] > 0.5 * (result["bottleneck_mbps"] - with_lanes["vip_mbps"])
    assert alone["bulk_mbps"] == 0
    assert "phase lanes" in done.stderr  # progress goes to stderr
    # other runs may share the machine: check this run's own sandbox tag
    tag = re.search(r"building namespaces (\S+?)-\{", done.stderr)
    assert tag is not None, done.stderr
    assert not list(Path("/run/netns").glob(f"{tag.group(1)}-*"))
    assert not (CGROUP2_ROOT / tag.group(1)).exists()
    assert not list(Path("/run/aiops/lanes").glob(f"*{tag.group(1)}*"))
