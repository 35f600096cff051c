"""`aiops lanes status` and `remove` when the world moved under them (issue 11, item 5): pinned maps deleted,
the device or the network namespace gone. Status reports each NIC's problem and exits 0 (no traceback);
remove says what happened and `--force` drops the pins and the state record. Before: status failed with
"bpf cmd 7: No such file or directory" and remove could not clean up after a deleted namespace."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.datapath import lanes
from aiops.datapath.loader import pin_dir
from aiops.lab.netns import Sandbox
from tests.ebpf.conftest import build_lab_nic, require_ebpf
from tests.host_helpers import require_root


def _state(dev: str, netns: str | None) -> lanes.LanesState:
    key = lanes.state_key(dev, netns)
    return lanes.LanesState(
        dev=dev,
        netns=netns,
        key=key,
        pin_dir=str(pin_dir(key)),
        policy_path="lanes.yaml",
        policy_sha256="0",
        source_sha256="0",
        complete=True,
        applied_ts_s=1.0,
        pid=1,
        rule_ids=["default"],
        rule_slots={"default": 0},
    )


def test_status_and_remove_with_records_of_vanished_nics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """State records whose pins, device or namespace are gone (no bcc needed: the records are written here)."""
    require_root()
    monkeypatch.setattr(lanes, "STATE_DIR", tmp_path / "lanes")
    gone_ns = f"aiopsgone{tmp_path.name[-6:]}"
    for state in (_state("lo", None), _state("aiopsnodev0", None), _state("eth9", gone_ns)):
        state.save()
    assert main(["lanes", "status", "--json", "--interval-s", "0.05"]) == 0
    rows = {row["dev"]: row["error"] for row in json.loads(capsys.readouterr().out)["nics"]}
    assert "pinned maps in /sys/fs/bpf/aiops/lo cannot be read" in rows["lo"]
    assert rows["aiopsnodev0"].startswith(
        "device aiopsnodev0 is gone: `aiops lanes remove --dev aiopsnodev0 --force`"
    )
    assert rows["eth9"].startswith(f"network namespace {gone_ns} is gone")

    assert main(["lanes", "remove", "--dev", "eth9", "--netns", gone_ns]) == 1
    assert "--force" in capsys.readouterr().err
    assert lanes.read_state(lanes.state_key("eth9", gone_ns)) is not None  # nothing removed without --force
    for argv in (["--dev", "eth9", "--netns", gone_ns], ["--dev", "aiopsnodev0"]):
        assert main(["lanes", "remove", *argv, "--force"]) == 0
    assert main(["lanes", "remove", "--dev", "lo"]) == 0  # the device exists: the ordinary removal
    assert lanes.all_states() == []


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiops.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI in this process (it only reads state, pins and namespaces): exit code, stdout, stderr."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_real_lanes_after_pins_and_namespace_are_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lanes applied for real on a veth in a namespace (by a real `aiops` process); then the pins are deleted,
    then the namespace; status and remove run in this process."""
    require_ebpf()
    with Sandbox("bi") as sandbox:
        nic = build_lab_nic(sandbox, 61)
        policy = tmp_path / "lanes.yaml"
        policy.write_text(
            "link_mbps: 100\nrules:\n  - {rule_id: default, match_kind: default, lane: standard}\n"
        )
        applied = _cli("lanes", "apply", "--dev", nic.dev, "--netns", nic.sender, "--policy", str(policy))
        assert applied.returncode == 0, applied.stderr
        key = lanes.state_key(nic.dev, nic.sender)
        where = ("--dev", nic.dev, "--netns", nic.sender)
        shutil.rmtree(pin_dir(key))
        code, out, err = _main(capsys, "lanes", "status", *where, "--json", "--interval-s", "0.05")
        assert code == 0 and "Traceback" not in err, err
        assert "cannot be read" in json.loads(out)["nics"][0]["error"]
        subprocess.run(["ip", "netns", "del", nic.sender], check=True)
        code, out, err = _main(capsys, "lanes", "status", *where, "--json", "--interval-s", "0.05")
        assert code == 0 and f"network namespace {nic.sender} is gone" in out
        code, out, err = _main(capsys, "lanes", "remove", *where)
        assert code == 1 and "--force" in err and "Traceback" not in err
        code, out, err = _main(capsys, "lanes", "remove", *where, "--force")
        assert code == 0, err
        assert lanes.read_state(key) is None and not pin_dir(key).exists()
