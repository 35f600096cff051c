"""`aiops run` with no config on a host named `GPU-A100-017.dc1.example` (a UTS namespace of its own, so the
machine's name is untouched): its components are named after the host, `gpu-a100-017` and
`gpu-a100-017/nic{k}` (first label, lowercased), in the store and on /metrics; no `node0` anywhere."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from aiops.store import Store
from tests.host_helpers import require_root
from tests.service_helpers import aiops_cmd, free_port

RUN_S = 10
HOST = "GPU-A100-017.dc1.example"
NAME = "gpu-a100-017"


def _require_unshare() -> None:
    """Root and util-linux's `unshare --uts`; a skip elsewhere, a failure under AIOPS_REQUIRE_EBPF=1."""
    require_root()
    problem = None
    if shutil.which("unshare") is None:
        problem = "unshare (util-linux) is not installed"
    else:
        tried = subprocess.run(["unshare", "--uts", "true"], capture_output=True, text=True, check=False)
        if tried.returncode != 0:
            problem = f"unshare --uts failed: {tried.stderr.strip()[:200]}"
    if problem is None:
        return
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail(f"{problem} and AIOPS_REQUIRE_EBPF=1 is set")
    pytest.skip(problem)


def _metrics(port: int, deadline_s: float) -> str:
    """/metrics once it names this host's NIC (the first collection done), else what it last said."""
    text = ""
    while time.monotonic() < deadline_s:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as answer:
                text = answer.read().decode()
        except OSError:
            text = ""
        if f'nic="{NAME}/nic' in text:
            return text
        time.sleep(0.5)
    return text


def test_aiops_run_with_no_config_names_its_components_after_the_host(tmp_path: Path) -> None:
    _require_unshare()
    db, port, log = tmp_path / "host.duckdb", free_port(), tmp_path / "service.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env["HOME"] = str(tmp_path)  # no ~/.config/aiops/config.toml, no $AIOPS_CONFIG: the defaults
    run = shlex.join(
        aiops_cmd("run", "--db", str(db), "--listen", f"127.0.0.1:{port}", "--duration-s", str(RUN_S))
    )
    with log.open("wb") as out:
        service = subprocess.Popen(
            ["unshare", "--uts", "sh", "-c", f"hostname {shlex.quote(HOST)} && exec {run}"],
            stdout=out,
            stderr=out,
            env=env,
        )
        try:
            metrics = _metrics(port, time.monotonic() + RUN_S)
            assert service.wait(timeout=RUN_S + 60) == 0, log.read_text()[-3000:]
        finally:
            if service.poll() is None:
                service.kill()
                service.wait()
    assert f'aiops_node_info{{node="{NAME}",rack="rack0"}} 1.0' in metrics, metrics[-2000:]
    assert f'nic="{NAME}/nic0"' in metrics and 'node="node0"' not in metrics
    with Store(db, read_only=True) as store:
        rows = store.query("SELECT component, kind, node FROM topology ORDER BY component")
        run_node = store.query("SELECT DISTINCT node FROM host_samples")
    nodes = [r["component"] for r in rows if r["kind"] == "node"]
    assert nodes == [NAME], rows
    others = [r for r in rows if r["kind"] in ("gpu", "nic", "accel")]
    assert others and all(r["component"].startswith(f"{NAME}/") and r["node"] == NAME for r in others), rows
    assert [r["node"] for r in run_node] == [NAME]
    assert os.uname().nodename != HOST  # the namespace's name stayed there
