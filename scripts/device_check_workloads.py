"""Device check for collectors/workloads on a real NVIDIA driver (docs/JOBS.md): a child process opens a CUDA
context through libcuda (ctypes, no framework needed) with torchrun's variables set, then this script asks the
real NVML (nvidia-ml-py) for GPU 0's compute processes and resolves what it lists with the project's own /proc
readers and torchrun resolver (and the whole WorkloadCollector where pyarrow is installed). Prints one JSON
object. Run: python scripts/device_check_workloads.py [path holding pynvml.py]"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if len(sys.argv) > 1:
    sys.path.insert(1, sys.argv[1])

CHILD = r"""
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
dev, ctx = ctypes.c_int(), ctypes.c_void_p()
rc = [cuda.cuInit(0), cuda.cuDeviceGet(ctypes.byref(dev), 0), cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)]
print("child cuda rc", rc, flush=True)
time.sleep(90)
"""


def _load(name: str, path: Path) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    out: dict[str, object] = {"python": sys.version.split()[0]}
    import pynvml

    proc_mod = _load("wl_proc", ROOT / "collectors/workloads/proc.py")
    from aiops.workload import WorkloadIdentity  # noqa: F401  (stdlib-only module)

    torchrun = _load("wl_torchrun", ROOT / "collectors/workloads/torchrun.py")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", ""),
        "CUDA_VISIBLE_DEVICES": "0",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "MASTER_ADDR": "devhost",
        "MASTER_PORT": "29500",
        "TORCHELASTIC_RUN_ID": "devcheck",
    }
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=env)
    out["child_pid"] = child.pid
    try:
        pynvml.nvmlInit()
        out["driver"] = pynvml.nvmlSystemGetDriverVersion()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        listed: list[dict[str, object]] = []
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            listed = [
                {"pid": p.pid, "usedGpuMemory": p.usedGpuMemory}
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            ]
            if any(p["pid"] == child.pid for p in listed) or child.poll() is not None:
                break
            time.sleep(0.5)
        out["nvml_processes"] = listed
        out["child_listed_by_its_pid"] = any(p["pid"] == child.pid for p in listed)
        resolved = []
        for p in listed:
            pid = int(p["pid"])  # type: ignore[call-overload]
            environ = proc_mod.read_environ(pid)  # type: ignore[attr-defined]
            cgroup = proc_mod.read_cgroup(pid)  # type: ignore[attr-defined]
            who = torchrun.TorchrunResolver().resolve(pid, cgroup or "", environ or {})  # type: ignore[attr-defined]
            resolved.append(
                {"pid": pid, "cgroup": cgroup, "env_read": environ is not None, "identity": repr(who)}
            )
        out["resolved"] = resolved
        try:
            import pyarrow  # noqa: F401

            from collectors.workloads.collector import WorkloadCollector
            from collectors.workloads.torchrun import TorchrunResolver

            collector = WorkloadCollector(pynvml, [handle], ["dev/gpu0"], "dev", [TorchrunResolver()])
            batches = collector.rows(time.time())
            out["collector_rows"] = [list(r) for r in batches["gpu_processes"].rows]
            out["collector_errors"] = [
                list(r) for r in batches.get("collector_errors", type("E", (), {"rows": []})).rows
            ]  # type: ignore[arg-type]
        except ImportError as exc:
            out["collector_rows"] = f"skipped: {exc}"
        pynvml.nvmlShutdown()
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        child.terminate()
        child.wait(10)
    print(json.dumps(out, default=str, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
