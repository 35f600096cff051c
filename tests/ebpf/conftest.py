"""Fixtures for the eBPF datapath tests: real namespaces, veths, qdiscs, cgroups and the bcc classifier.

`require_ebpf()` skips a test when root, bcc, kernel headers, netns or cgroup v2 are missing, and fails it
instead when AIOPS_REQUIRE_EBPF=1 (CI runs as root, where a skip would hide a broken datapath).
The classifier is compiled once per session (bcc takes seconds): tests share one lanes NIC and change its
policy live, which is itself the feature under test; they read counter deltas, never absolute values.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiops.control.laws import initial_rates
from aiops.datapath import lanes, tc
from aiops.datapath.loader import pin_dir
from aiops.datapath.maps import LaneMaps
from aiops.datapath.policy import Policy, parse_policy
from aiops.lab.netns import CGROUP2_ROOT, Sandbox


def ebpf_missing() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "bcc (python3-bpfcc) is not importable"
    if not Path(f"/lib/modules/{os.uname().release}/build").exists():
        return f"/lib/modules/{os.uname().release}/build is missing (run scripts/setup.sh)"
    for tool in ("ip", "tc", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not (CGROUP2_ROOT / "cgroup.procs").exists():
        return "no cgroup v2 hierarchy"
    probe = f"aiopsprobe{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"cannot create network namespaces: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def require_ebpf() -> None:
    missing = ebpf_missing()
    if missing is None:
        return
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail(f"eBPF prerequisites missing with AIOPS_REQUIRE_EBPF=1: {missing}")
    pytest.skip(f"eBPF prerequisites missing: {missing}")


@dataclass
class LabNic:
    """A sender namespace whose veth `dev` has lanes, a receiver with several addresses, two cgroups."""

    sandbox: Sandbox
    sender: str
    receiver: str
    dev: str
    peer_dev: str
    peer_ip: str  # 198.18.N.2
    storage_ip: str  # 198.18.N.3 on the receiver too
    other_ip: str  # 198.18.N.4
    trainer_cgroup: Path
    checkpoint_cgroup: Path

    def apply(self, policy: Policy) -> lanes.ApplyResult:
        return lanes.apply(self.dev, policy, "<test>", netns=self.sender, rates=initial_rates(policy))

    def send_udp(
        self, dst: str, dport: int, *, count: int = 20, cgroup: Path | None = None, **flags: int
    ) -> dict[str, Any]:
        args = ["udp", "--dst", dst, "--dport", str(dport), "--count", str(count)]
        for name, value in flags.items():
            args += [f"--{name.replace('_', '-')}", str(value)]
        process = self.sandbox.python(self.sender, args, cgroup)
        out, _ = process.communicate(timeout=30)
        result: dict[str, Any] = json.loads(out)
        return result

    def class_packets(self) -> dict[str, float]:
        stats = tc.class_stats(self.dev, self.sender)
        return {lane: stats.get(minor, {}).get("packets", 0.0) for lane, minor in tc.LANE_MINORS.items()}

    def slot(self, rule_id: str) -> int:
        """The counter slot of a rule, as apply assigned it."""
        state = lanes.read_state(lanes.state_key(self.dev, self.sender))
        assert state is not None
        return state.rule_slots[rule_id]

    def maps(self) -> LaneMaps:
        return LaneMaps(pin_dir(lanes.state_key(self.dev, self.sender)))


def policy_with(rules: list[dict[str, Any]], **extra: Any) -> Policy:
    data: dict[str, Any] = {
        "link_mbps": 100,
        "rules": [*rules, {"rule_id": "default", "match_kind": "default", "lane": "standard"}],
    }
    data.update(extra)
    return parse_policy(data, "<test>")


def build_lab_nic(sandbox: Sandbox, subnet: int) -> LabNic:
    sender, receiver = sandbox.netns("s"), sandbox.netns("r")
    suffix = sandbox.tag[-6:]
    dev, peer_dev = f"ls{suffix}", f"lr{suffix}"
    base = f"198.18.{subnet}"
    sandbox.veth(sender, dev, f"{base}.1/24", receiver, peer_dev, f"{base}.2/24")
    for host in (3, 4):
        sandbox.add_address(receiver, peer_dev, f"{base}.{host}/24")
    for ns in (sender, receiver):
        sandbox.sysctl(ns, "net.ipv4.tcp_ecn", "1")
    return LabNic(
        sandbox,
        sender,
        receiver,
        dev,
        peer_dev,
        f"{base}.2",
        f"{base}.3",
        f"{base}.4",
        sandbox.cgroup("trainer"),
        sandbox.cgroup("checkpoint"),
    )


@pytest.fixture(scope="session")
def lab_nic() -> Iterator[LabNic]:
    require_ebpf()
    sandbox = Sandbox("t")
    nic: LabNic | None = None
    try:
        nic = build_lab_nic(sandbox, 10)
        nic.apply(policy_with([]))
        yield nic
    finally:
        if nic is not None:
            lanes.remove(nic.dev, nic.sender)
        sandbox.close()


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    require_ebpf()
    with Sandbox("t") as box:
        yield box


def wait_until(predicate: Any, timeout_s: float = 10.0, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return False
