"""`aiops run` on this very host, as root, with no config file, for 12 s: what the host has lands in the
store (procfs, PSI, network devices, whatever hwmon and thermal sysfs exist), what it lacks (NVML here: no
driver) is reported once, and the node's topology names its real NIC."""

from __future__ import annotations

import fnmatch
import os
import socket
import subprocess
from pathlib import Path

from aiops.store import Store
from collectors.net import DEFAULT_SKIP
from tests.host_helpers import require_root
from tests.service_helpers import aiops_cmd, free_port

RUN_S = 12  # long enough for every collector to tick several times and NVML to be reported once


def _netdevs() -> set[str]:
    return {
        d.name
        for d in Path("/sys/class/net").iterdir()
        if (d / "statistics").is_dir() and not any(fnmatch.fnmatch(d.name, p) for p in DEFAULT_SKIP)
    }


def test_aiops_run_with_no_config_collects_this_host(tmp_path: Path) -> None:
    require_root()
    db = tmp_path / "host.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env["HOME"] = str(tmp_path)  # no ~/.config/aiops/config.toml, no $AIOPS_CONFIG: the defaults
    log = tmp_path / "service.log"
    with log.open("wb") as out:
        done = subprocess.run(
            aiops_cmd(
                "run", "--db", str(db), "--listen", f"127.0.0.1:{free_port()}", "--duration-s", str(RUN_S)
            ),
            stdout=out,
            stderr=out,
            env=env,
            timeout=RUN_S + 60,
            check=False,
        )
    assert done.returncode == 0, log.read_text()[-3000:]
    with Store(db, read_only=True) as store:

        def count(sql: str) -> int:
            return int(store.scalar(sql) or 0)

        assert count("SELECT count(*) FROM host_samples WHERE cpu_util_pct IS NOT NULL") >= RUN_S // 2
        assert count("SELECT count(*) FROM host_samples WHERE mem_used_pct > 0") >= RUN_S // 2
        if Path("/proc/pressure/cpu").exists():
            resources = {r["resource"] for r in store.query("SELECT DISTINCT resource FROM psi_samples")}
            assert {"cpu", "io", "memory"} <= resources
            assert count("SELECT count(*) FROM psi_samples WHERE resource = 'cpu'") >= RUN_S // 2
        devs = {r["dev"] for r in store.query("SELECT DISTINCT dev FROM netdev_samples")}
        assert devs == _netdevs() and devs
        assert count("SELECT count(*) FROM netdev_samples WHERE rx_bytes > 0") > 0
        hwmon_here = Path("/sys/class/hwmon").is_dir() and any(Path("/sys/class/hwmon").iterdir())
        zones_here = (
            list(Path("/sys/class/thermal").glob("thermal_zone*"))
            if Path("/sys/class/thermal").is_dir()
            else []
        )
        assert (count("SELECT count(*) FROM hwmon_samples") > 0) == hwmon_here
        assert (count("SELECT count(*) FROM thermal_zone_samples") > 0) == bool(zones_here)
        errors = store.query("SELECT collector, error, detail FROM collector_errors ORDER BY ts_s")
        nvml = [e for e in errors if e["collector"] == "nvml"]
        assert len(nvml) == 1, nvml  # once, not every second
        assert nvml[0]["error"] == "unavailable" and nvml[0]["detail"].startswith("NVML unavailable: ")
        for collector, here in (("hwmon", hwmon_here), ("sysfs-thermal", bool(zones_here))):
            said = [e for e in errors if e["collector"] == collector and e["error"] == "unavailable"]
            assert len(said) == (0 if here else 1), (collector, said)
        assert all(e["error"] != "internal" for e in errors), errors
        nics = {r["device"] for r in store.query("SELECT device FROM topology WHERE kind = 'nic'")}
        assert nics and nics <= _netdevs() | {d for d in os.listdir("/sys/class/net")}
        here = socket.gethostname().lower().split(".", 1)[0]  # no config: the node is named after this host
        assert count(f"SELECT count(*) FROM topology WHERE kind = 'node' AND component = '{here}'") == 1
