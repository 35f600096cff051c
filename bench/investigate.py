"""`aiops investigate` on a large kernel log: wall time, throughput and peak RSS of the investigating process.

The log is real corpus lines (evals/real: a GPU falling off the bus among AER, ECC and driver-load lines)
repeated to `--mb` MiB in a temporary file; the investigation runs in a child process, which reports its own
VmHWM (peak RSS of that program image). The issue's figure is 1 GiB (`--mb 1024`, target peak RSS <= 300 MB);
run it on an idle machine. Prints {"bytes": ..., "lines": ..., "wall_s": ..., "mb_per_s": ..., "peak_rss_mb": ...}.

    .venv/bin/python bench/investigate.py [--mb 1024] [--db]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = (
    ("xid79-aer-surprise-down-tesla-2018", "dmesg.txt"),
    ("xid48-dbe-xid64-gpu-operator-validator-2024", "kern.log"),
    ("healthy-dmesg-driver-load-device-plugin-helm-2023", "dmesg.txt"),
)
CHILD = """
import json, sys
from pathlib import Path
from aiops.cli.main import main
code = main(["investigate", sys.argv[1], "--json"] + (["--db", sys.argv[2]] if len(sys.argv) > 2 else []))
hwm_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"exit": code, "peak_rss_mb": hwm_kb / 1024}), file=sys.stderr)
"""


def write_log(path: Path, size_bytes: int) -> int:
    block = b"".join((ROOT / "evals" / "real" / case / name).read_bytes() for case, name in CASES) * 256
    written = 0
    with path.open("wb") as handle:
        while written < size_bytes:
            handle.write(block)
            written += len(block)
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1024, help="log size in MiB (default 1024)")
    parser.add_argument("--db", action="store_true", help="also store the events (aiops investigate --db)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "dmesg-big.txt"
        size = write_log(log, args.mb * 1024 * 1024)
        argv = [sys.executable, "-c", CHILD, str(log)] + ([str(Path(tmp) / "w.duckdb")] if args.db else [])
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, check=True, env={"PYTHONPATH": str(ROOT)})
        wall_s = time.perf_counter() - start
    result = json.loads(done.stdout)
    child = json.loads(done.stderr.strip().splitlines()[-1])
    print(
        json.dumps(
            {
                "bytes": size,
                "lines": result["sources"][0]["lines"],
                "verdict": result["verdict"],
                "db": args.db,
                "wall_s": round(wall_s, 2),
                "mb_per_s": round(size / 1e6 / wall_s, 1),
                "peak_rss_mb": round(child["peak_rss_mb"], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
