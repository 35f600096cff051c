"""Per-flow TCP telemetry (srtt, cwnd, retransmits) from the tcp:tcp_probe and tcp:tcp_retransmit_skb
tracepoints (bpf/tcp_probe.bpf.c). `read()` drains the per-CPU map: each call covers the time since the last.

The store has no per-flow TCP table yet; flows are returned as `TcpFlowSample`s (JSON-ready) and rolled up
per lane by collectors/ebpf/telemetry.py (retransmits go into nic_samples.retransmits).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from aiops.datapath.abi import addr_text
from aiops.datapath.loader import compile_source
from aiops.errors import PrerequisiteError

TRACEFS = "/sys/kernel/tracing"
MAX_FLOWS_PER_READ = 16384


@dataclass(frozen=True)
class TcpFlowSample:
    src: str
    dst: str
    sport: int
    dport: int
    samples: int
    srtt_us_mean: float | None
    srtt_us_max: int
    cwnd_mean: float | None
    cwnd_last: int
    retransmits: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ensure_tracefs() -> None:
    if os.path.isdir(f"{TRACEFS}/events/tcp"):
        return
    done = subprocess.run(
        ["mount", "-t", "tracefs", "nodev", TRACEFS], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not os.path.isdir(f"{TRACEFS}/events/tcp"):
        raise PrerequisiteError(
            f"tracefs with tcp events is not available at {TRACEFS}: {done.stderr.strip()}"
        )


class TcpProbe:
    """Attach on construction, `read()` per interval, `close()` to detach."""

    name = "ebpf_tcp"

    def __init__(self) -> None:
        ensure_tracefs()
        self._bpf = compile_source("tcp_probe.bpf.c")  # TRACEPOINT_PROBEs attach at load
        self._flows = self._bpf[b"flows"]

    def read(self) -> list[TcpFlowSample]:
        out: list[TcpFlowSample] = []
        items = list(self._flows.items())[:MAX_FLOWS_PER_READ]
        self._flows.clear()
        for key, per_cpu in items:
            samples = sum(v.samples for v in per_cpu)
            freshest = max(per_cpu, key=lambda v: int(v.last_ns))
            out.append(
                TcpFlowSample(
                    src=addr_text(bytes(ctypes.string_at(ctypes.addressof(key.saddr), 16))),
                    dst=addr_text(bytes(ctypes.string_at(ctypes.addressof(key.daddr), 16))),
                    sport=int(key.sport),
                    dport=int(key.dport),
                    samples=int(samples),
                    srtt_us_mean=sum(v.srtt_us_sum for v in per_cpu) / samples if samples else None,
                    srtt_us_max=int(max(v.srtt_us_max for v in per_cpu)),
                    cwnd_mean=sum(v.cwnd_sum for v in per_cpu) / samples if samples else None,
                    cwnd_last=int(freshest.cwnd_last),
                    retransmits=int(sum(v.retransmits for v in per_cpu)),
                )
            )
        return out

    def close(self) -> None:
        self._bpf.cleanup()
