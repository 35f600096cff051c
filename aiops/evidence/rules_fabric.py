"""NVLink fabric rules: the fabric manager, and DCGM's NVLink readings (sources: rules.py).

- The fabric manager failing on an NVSwitch system (the start script says `Detected NVL5+ system`, it found
  NVSwitch devices, or nvidia-smi shows a GPU's fabric registration not done): NVIDIA's Fabric Manager User
  Guide: on NVSwitch systems CUDA cannot start until the fabric manager has registered the GPUs (error 802),
  so the driver stack is the cause: `gpu_driver_firmware_fault` 0.65. Without such a line the same failure
  (`NV_WARN_NOTHING_TO_DO`: no NVSwitch found) is also what a host without NVSwitch prints, where the fabric
  manager does not apply: findings only.
- DCGM reporting NVLink links down (`dcgmi diag` warnings, `dcgmi health` NVLINK, `dcgmi nvlink
  --link-status`): every link of a GPU down is also what a GPU without NVLink (a PCIe board, no bridge)
  reads, a configuration / false-positive reading, so `nvlink_degraded` stays at 0.4 (inconclusive) naming
  both readings; a GPU with some links up and some down has a link fault: 0.6. NVLink Xids (rules_gpu.nvlink)
  decide by themselves.
"""

from __future__ import annotations

import re

from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.evidence.hyp import Hyp, Namer, by, hyp, merge
from aiops.evidence.rules_gpu import NVLINK_WARNING_XIDS, NVLINK_XIDS, xids

_LINK_DOWN = re.compile(r"GPU ?(\d{1,3})'s NvLink link (\d{1,3}) is currently down")


def fabric_manager(c: Collected, n: Namer) -> list[Hyp]:
    errors = c.of("fm_error")
    system = c.of("fm_system") + [e for e in c.of("fabric_state") if e.code == 1]
    if not errors or not system:
        return []
    return [
        hyp(
            "gpu_driver_firmware_fault",
            n.node(errors[0]),
            0.65,
            "the fabric manager failed on an NVSwitch system: the GPUs are not registered with the NVLink "
            "fabric and CUDA cannot start on them (error 802) until it runs: the driver stack, not the boards",
            ("fabric manager failure", errors),
            ("the host is an NVSwitch system", system),
        )
    ]


def _messages(c: Collected) -> list[tuple[str, list[LogEvent]]]:
    """Per DCGM test (or health system), its message rows joined as written (the table wraps words)."""
    out: list[tuple[str, list[LogEvent]]] = []
    for events in by(c.of("dcgm_msg"), lambda e: f"{e.source}/{e.detail.get('test', '')}").values():
        out.append(("".join(e.detail.get("text", "") for e in events), events))
    return out


def dcgm_nvlink(c: Collected, n: Namer) -> list[Hyp]:
    if xids(c, NVLINK_XIDS | NVLINK_WARNING_XIDS):
        return []
    down: dict[str, list[LogEvent]] = {}
    for text, events in _messages(c):
        for gpu, _link in _LINK_DOWN.findall(text):
            down.setdefault(f"GPU{gpu}", []).extend(e for e in events if e not in down.get(f"GPU{gpu}", []))
    for e in c.of("dcgm_health"):
        if e.detail.get("system", "").upper().startswith("NVLINK"):
            down.setdefault(e.component or "", []).append(e)
    out: list[Hyp] = []
    for e in c.of("nvlink_links"):
        up, gone = int(e.detail.get("up", "0")), int(e.detail.get("down", "0"))
        if gone and up:
            out.append(
                hyp(
                    "nvlink_degraded",
                    n.gpu(e),
                    0.6,
                    f"{gone} NVLink link(s) of the GPU down while {up} are up: a link fault",
                    ("DCGM NVLink link status", [e]),
                )
            )
        elif gone:
            down.setdefault(e.component or "", []).append(e)
    for _comp, events in down.items():
        out.append(
            hyp(
                "nvlink_degraded",
                n.gpu(events[0]),
                0.4,
                "DCGM reports every NVLink link it names down. On a GPU without NVLink (a PCIe board, no NVLink "
                "bridge) all links read down: a configuration / false-positive reading, not a fault; on an "
                "NVLink GPU it is a link or fabric fault. `nvidia-smi nvlink -s` and the board model decide",
                ("DCGM: NVLink links down", events),
            )
        )
    return merge(out)
