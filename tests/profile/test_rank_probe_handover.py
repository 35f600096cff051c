"""The rank-timing probes are compiled by bcc in a child process and handed over by descriptor
(aiops/profile/handover.py): the process that keeps and attaches them (a node agent) never imports bcc nor maps
libbcc or LLVM, which stayed in its RSS when it compiled in-process (docs/BENCHMARKS.md, "Footprint"). Run in a
fresh interpreter, as root with bcc and the real libnccl (fails instead of skipping with AIOPS_REQUIRE_EBPF=1)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.profile.test_rank_timing_ebpf import require_rank_timing

PROBE = """
import json, sys
from aiops.profile.rank_probes import RankProbes
probes = RankProbes({(0, 0): ("libnccl", sys.argv[1])})
probes.attached.attach_links()
attached = len(probes.attached.events)
probes.attached.set_gate(True)
probes.attached.set_gate(False)
probes.close()
maps = open("/proc/self/maps").read()
print(json.dumps({
    "links": len(probes.attached.links),
    "attached": attached,
    "bcc_imported": "bcc" in sys.modules,
    "mapped": sorted({line.split()[-1] for line in maps.splitlines() if "libbcc" in line or "LLVM" in line}),
    "compiler_peak_mb": probes.attached.compiled.child_peak_mb,
}))
"""


def test_the_agent_that_keeps_the_probes_never_loads_the_compiler() -> None:
    nccl = require_rank_timing()
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(nccl / "lib" / "libnccl.so.2")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["links"] > 0 and seen["attached"] == seen["links"]  # the uprobes were attached here
    assert seen["bcc_imported"] is False
    assert seen["mapped"] == []
    assert seen["compiler_peak_mb"] > 100  # the compiler's memory went with its child
