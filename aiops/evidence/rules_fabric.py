"""NVLink fabric and DCGM rules: the fabric manager, DCGM's NVLink readings, DCGM's memory tests (sources:
rules.py).

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
from aiops.evidence.hypotheses import Hyp, Namer, by, hyp, merge
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
    return list(_keyed_messages(c).values())


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
                    ("NVLink link status", [e]),
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


_PAGE_TESTS = re.compile(r"Page Retirement|Row Remap|retire", re.I)
_MEMORY_TESTS = re.compile(r"^(?:GPU )?Memory$|^memory$|memtest|memory_bandwidth", re.I)
_ECC_TEXT = re.compile(
    r"\bECC\b|uncorrectable|\bDBE\b|double[- ]bit|row remap|page retire|retired page|miscompare|memory error|"
    r"DCGM_FR_(?:DBE|SBE|ECC|ROW_REMAP|RETIRED|PENDING_PAGE|MEMORY_MISMATCH|FAULTY_MEMORY)",
    re.I,
)


def dcgm_memory(c: Collected, n: Namer) -> list[Hyp]:
    """A failed DCGM diagnostic that is about the GPU's memory (DCGM Diagnostics documentation): the
    `Page Retirement/Row Remap` deployment test fails on pending retirements or remapping failures (0.7); a
    memory test fails for ECC/miscompare errors its messages name (0.65). A memory test that failed for another
    reason (a CUDA context it could not create: the GPU busy or unavailable) names no memory fault: findings."""
    texts = {key: text for key, (text, _events) in _keyed_messages(c).items()}
    out: list[Hyp] = []
    for e in c.of("dcgm_diag"):
        test = e.detail.get("test", "")
        if e.code != 1:
            continue
        if _PAGE_TESTS.search(test):
            conf, why = 0.7, "the diagnostic's page retirement / row remap check failed"
        elif _MEMORY_TESTS.search(test) and _ECC_TEXT.search(texts.get(f"{e.source}/{test}", "")):
            conf, why = 0.65, "the diagnostic's memory test failed on memory errors its messages name"
        else:
            continue
        out.append(hyp("gpu_ecc_error", n.gpu(e), conf, why, ("DCGM diagnostic failed", [e])))
    return merge(out)


def _keyed_messages(c: Collected) -> dict[str, tuple[str, list[LogEvent]]]:
    return {
        key: ("".join(e.detail.get("text", "") for e in events), events)
        for key, events in by(c.of("dcgm_msg"), lambda e: f"{e.source}/{e.detail.get('test', '')}").items()
    }
