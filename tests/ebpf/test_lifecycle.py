"""`aiops lanes apply/status/remove` on real NICs: idempotence, exact removal, crash safety, fail-open."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from aiops.datapath import lanes
from aiops.datapath.loader import pin_dir
from aiops.lab.netns import Sandbox, in_ns
from aiops.store import Store
from tests.ebpf.conftest import LabNic, build_lab_nic, wait_until

pytestmark = pytest.mark.ebpf


def cli(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiops.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def nic_snapshot(nic: LabNic) -> Any:
    def show(what: str, *where: str, as_json: bool = True) -> Any:
        argv = [*in_ns(nic.sender), "tc", *(["-j"] if as_json else []), what, "show", "dev", nic.dev, *where]
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return (json.loads(out) if out.strip() else []) if as_json else out

    return {
        "qdisc": show("qdisc"),
        "filter": show("filter"),
        "egress": show("filter", "egress"),
        "class": show("class", as_json=False),  # HTB classes print as text even with -j (iproute2 6.1)
    }


def write_policy(tmp_path: Path, nic: LabNic) -> str:
    path = tmp_path / "lanes.yaml"
    path.write_text(
        "link_mbps: 100\n"
        "rules:\n"
        f"  - {{rule_id: collective-cgroup, match_kind: cgroup, cgroups: ['{nic.sandbox.cgroup_rel(nic.trainer_cgroup)}'],"
        " lane: vip}\n"
        f"  - {{rule_id: storage-prefix, match_kind: dst_prefix, prefixes: ['{nic.storage_ip}/32'], lane: bulk}}\n"
        "  - {rule_id: default, match_kind: default, lane: standard}\n"
    )
    return str(path)


def exchange_completes(nic: LabNic, port: int) -> bool:
    """A request/response over TCP from the trainer cgroup finishes: traffic flows through the lanes."""
    server = nic.sandbox.python(nic.receiver, ["vip-server", "--port", str(port), "--max-s", "20"])
    assert server.stdout is not None
    server.stdout.readline()
    client = nic.sandbox.python(
        nic.sender,
        ["vip-client", "--dst", nic.peer_ip, "--port", str(port), "--duration-s", "0.5", "--rate-hz", "20"],
        nic.trainer_cgroup,
    )
    out, _ = client.communicate(timeout=30)
    nic.sandbox.stop(server)
    return client.returncode == 0 and len(json.loads(out)["latencies_ms"]) > 0


def test_apply_is_idempotent_and_remove_restores_the_nic(sandbox: Sandbox, tmp_path: Path) -> None:
    nic = build_lab_nic(sandbox, 20)
    before = nic_snapshot(nic)
    policy = write_policy(tmp_path, nic)
    first = cli("lanes", "apply", "--dev", nic.dev, "--netns", nic.sender, "--policy", policy)
    assert first.returncode == 0, first.stderr
    assert "created" in first.stderr
    applied = nic_snapshot(nic)
    again = cli("lanes", "apply", "--dev", nic.dev, "--netns", nic.sender, "--policy", policy)
    assert again.returncode == 0 and "updated" in again.stderr, again.stderr
    assert nic_snapshot(nic)["filter"] == applied["filter"]  # same program, not a second filter

    assert exchange_completes(nic, 7100)
    status = cli("lanes", "status", "--dev", nic.dev, "--netns", nic.sender, "--json", "--interval-s", "0.1")
    assert status.returncode == 0, status.stderr
    row = json.loads(status.stdout)["nics"][0]
    assert row["lanes"]["vip"]["packets"] > 0  # the trainer cgroup's exchange went to VIP
    assert {r["rule_id"] for r in row["rules"]} == {"collective-cgroup", "storage-prefix", "default"}
    assert row["lanes"]["vip"]["htb_ceil_mbps"] == pytest.approx(100)

    removed = cli("lanes", "remove", "--dev", nic.dev, "--netns", nic.sender)
    assert removed.returncode == 0, removed.stderr
    assert nic_snapshot(nic) == before
    key = lanes.state_key(nic.dev, nic.sender)
    assert not pin_dir(key).exists()
    assert lanes.read_state(key) is None
    assert "no lanes" in cli("lanes", "remove", "--dev", nic.dev, "--netns", nic.sender).stderr


def test_kill_9_mid_apply_then_apply_replaces_stale_state(sandbox: Sandbox, tmp_path: Path) -> None:
    nic = build_lab_nic(sandbox, 21)
    before = nic_snapshot(nic)
    policy = write_policy(tmp_path, nic)
    key = lanes.state_key(nic.dev, nic.sender)
    crashed = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiops.cli.main",
            "lanes",
            "apply",
            "--dev",
            nic.dev,
            "--netns",
            nic.sender,
            "--policy",
            policy,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # the intent record is written before the first change; kill while bcc compiles
        assert wait_until(lambda: lanes.read_state(key) is not None, timeout_s=60)
    finally:
        os.kill(crashed.pid, signal.SIGKILL)
        crashed.wait(timeout=10)
    state = lanes.read_state(key)
    assert state is not None and not state.complete

    fresh = cli("lanes", "apply", "--dev", nic.dev, "--netns", nic.sender, "--policy", policy)
    assert fresh.returncode == 0, fresh.stderr
    assert "stale" in fresh.stderr
    state = lanes.read_state(key)
    assert state is not None and state.complete
    filters = [f for f in nic_snapshot(nic)["filter"] if f.get("options")]
    assert len(filters) == 1

    # The controller is gone (the apply process exited): the datapath fails open and keeps classifying.
    assert exchange_completes(nic, 7101)
    assert cli("lanes", "remove", "--dev", nic.dev, "--netns", nic.sender).returncode == 0
    assert nic_snapshot(nic) == before


def test_controller_killed_leaves_traffic_flowing(lab_nic: LabNic, tmp_path: Path) -> None:
    nic = lab_nic
    policy = write_policy(tmp_path, nic)
    assert cli("lanes", "apply", "--dev", nic.dev, "--netns", nic.sender, "--policy", policy).returncode == 0
    controller = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiops.cli.main",
            "lanes",
            "control",
            "--dev",
            nic.dev,
            "--netns",
            nic.sender,
            "--policy",
            policy,
            "--duration-s",
            "60",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert exchange_completes(nic, 7102)
    finally:
        os.kill(controller.pid, signal.SIGKILL)
        controller.wait(timeout=10)
    assert exchange_completes(nic, 7103)


def test_collect_writes_lane_telemetry_into_a_store(lab_nic: LabNic, tmp_path: Path) -> None:
    """`aiops lanes collect` (the CLI over collect_lanes): per-lane samples each interval, a rules snapshot."""
    nic = lab_nic
    policy = write_policy(tmp_path, nic)
    assert cli("lanes", "apply", "--dev", nic.dev, "--netns", nic.sender, "--policy", policy).returncode == 0
    db = tmp_path / "lanes.duckdb"
    done = cli(
        "lanes",
        "collect",
        *("--dev", nic.dev, "--netns", nic.sender, "--db", str(db), "--no-tcp"),
        *("--interval-s", "0.2", "--duration-s", "0.4"),
    )
    assert done.returncode == 0, done.stderr
    assert "rows into" in done.stderr
    with Store(str(db)) as store:
        samples = store.scalar("SELECT count(*) FROM nic_samples WHERE nic = 'node0/nic0'")
        rules = store.scalar("SELECT count(*) FROM lane_rules WHERE scope = 'node0/nic0'")
    assert samples >= 3 and samples % 3 == 0  # one row per lane and interval; the first collect only primes
    assert rules == 3
