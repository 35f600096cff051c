"""Driver statistics through SIOCETHTOOL (`ethtool -S`) and the pause-frame counters among them: the name mapping
on mlx5's names, and the ioctl for real on a veth pair in a network namespace the test makes (veth has driver
statistics but no pause counters: the names are read, the pause totals stay None)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops.store import Store
from collectors.ethtool import PauseFrames, driver_stats, pause_counters, pause_frames
from collectors.net import NetdevCollector
from tests.host_helpers import counters, netdev, require_root

REPO = Path(__file__).resolve().parents[1]
# a few of what `ethtool -S` prints on a ConnectX-6 Dx port (mlx5 counters.rst names), values made up
MLX5_STATS = {
    "rx_packets_phy": 912345,
    "rx_pause_ctrl_phy": 7,
    "tx_pause_ctrl_phy": 3,
    "rx_prio3_pause": 1200,
    "tx_prio3_pause": 40,
    "rx_prio3_pause_duration": 99999,  # microseconds, not frames: not counted
    "rx_prio0_pause": 5,
    "tx_prio7_pause_transition": 2,  # transitions, not frames: not counted
    "rx_discards_phy": 0,
}


def test_mlx5_pause_counters_add_up_per_direction() -> None:
    assert pause_counters(MLX5_STATS) == PauseFrames(rx_pause_frames=7 + 1200 + 5, tx_pause_frames=3 + 40)


def test_a_driver_without_pause_counters_reports_none_not_zero() -> None:
    assert pause_counters({"peer_ifindex": 4, "rx_queue_0_xdp_packets": 0}) == PauseFrames(None, None)
    assert pause_counters({"tx_pause_ctrl_phy": 0}) == PauseFrames(None, 0)


def test_bad_device_names_are_refused_before_the_kernel() -> None:
    for name in ("", "x" * 16, "eth0\u00e9"):
        with pytest.raises((ValueError, UnicodeEncodeError)):
            driver_stats(name)
    assert pause_frames("no-such-dev0") == PauseFrames(None, None)


@pytest.fixture
def veth_netns() -> Iterator[str]:
    require_root()
    namespace = f"aiops-eth-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        ip = ["ip", "-n", namespace, "link"]
        subprocess.run([*ip, "add", "vetha", "type", "veth", "peer", "name", "vethb"], check=True)
        subprocess.run([*ip, "set", "vetha", "up"], check=True)
        subprocess.run([*ip, "set", "vethb", "up"], check=True)
        yield namespace
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)


def test_the_ioctl_reads_a_real_veth_pair(veth_netns: str) -> None:
    probe = (
        "import json; from collectors.ethtool import driver_stats, pause_frames; "
        "print(json.dumps({'stats': driver_stats('vetha'), 'pause': list(vars(pause_frames('vetha')).values())}))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["ip", "netns", "exec", veth_netns, sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    out = json.loads(done.stdout)
    assert "peer_ifindex" in out["stats"]  # veth's own statistic (drivers/net/veth.c), read by name
    assert out["pause"] == [None, None]


def test_netdev_rows_carry_the_pause_totals(tmp_path: Path, store: Store) -> None:
    netdev(tmp_path, "ens1f0np0", None, counters(), operstate="up", carrier_changes=0, speed=400000)
    netdev(tmp_path, "eth9", None, counters(), operstate="up", carrier_changes=0, speed=1000)
    readings = {"ens1f0np0": pause_counters(MLX5_STATS), "eth9": PauseFrames(None, None)}
    store.ingest_many(NetdevCollector("node3", tmp_path, pause=readings.__getitem__).collect(5.0))
    rows = {
        r["dev"]: r for r in store.query("SELECT dev, rx_pause_frames, tx_pause_frames FROM netdev_samples")
    }
    assert (rows["ens1f0np0"]["rx_pause_frames"], rows["ens1f0np0"]["tx_pause_frames"]) == (1212, 43)
    assert (rows["eth9"]["rx_pause_frames"], rows["eth9"]["tx_pause_frames"]) == (None, None)
    store.ingest_many(NetdevCollector("node3", tmp_path).collect(6.0))  # a fixture tree: no reader, NULL
    assert store.scalar("SELECT count(*) FROM netdev_samples WHERE ts_s = 6 AND rx_pause_frames IS NULL") == 2


def test_the_netdev_collector_reads_pause_counters_of_a_real_veth(veth_netns: str) -> None:
    """Inside the namespace, /sys/class/net and the ioctl see its veth pair: rows for both, pause columns NULL."""
    probe = (
        "import json; from collectors.net import NetdevCollector; from collectors.ethtool import pause_frames; "
        "t = NetdevCollector('node0', '/', skip=('lo',), pause=pause_frames).collect(1.0)['netdev_samples']; "
        "print(json.dumps(t.select(['dev', 'rx_pause_frames', 'tx_pause_frames']).to_pylist()))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["ip", "netns", "exec", veth_netns, sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    rows = json.loads(done.stdout)
    assert sorted(r["dev"] for r in rows) == ["vetha", "vethb"]
    assert all(r["rx_pause_frames"] is None and r["tx_pause_frames"] is None for r in rows)
