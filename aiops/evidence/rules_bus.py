"""A GPU lost from the bus, joined across lines and files (sources: rules.py, docs/INVESTIGATE.md):

- Xid 79 / "fallen off the bus" (NVIDIA Xid catalogue) 0.93, 0.95 with an AER Surprise Down; NVML's
  NVML_ERROR_GPU_IS_LOST ("the GPU has fallen off the bus or has otherwise become inaccessible", as NVML,
  nvidia-smi, the device plugin or slurmstepd report it) 0.75, 0.85 when the bus shows it too;
- a GPU whose PCI config space reads as all ones (`rev ff`, `Unknown header type 7f`) joined with nvidia-smi or
  NVML not reaching that GPU (or any GPU, when the unreachable one is not named) 0.85: the board does not
  answer on the bus; config space lost alone 0.5 (inconclusive: runtime power management powers switchable
  GPUs down and reads the same, pciutils/pciutils#91); nvidia-smi unable to get a handle for a named GPU,
  alone, 0.45 (lost, or a driver that could not initialise it);
- a fatal uncorrected AER whose recovery failed (`AER: device recovery failed`, the GPU's driver `can't
  recover`): the link to the GPU is down and the kernel could not bring it back, 0.8 with a Surprise Down
  (the link dropped) or a completion timeout, else 0.7; 0.5 when no line of the GPU's driver names the device
  (an NVMe or a NIC behind the port reads the same); a Surprise Down alone 0.55.
"""

from __future__ import annotations

import re

from aiops.evidence.collect import Collected
from aiops.evidence.events import LogEvent
from aiops.evidence.hypotheses import Hyp, Namer, anchored, by, hyp, merge, per_component
from aiops.evidence.rules_gpu import xids

_GPU_CLASS = re.compile(r"VGA|3D|Display", re.I)
_COMPLETION_TIMEOUT = re.compile(r"CmpltTO|Completion Timeout")


def _is_gpu(e: LogEvent) -> bool:
    """A config-space-lost device that is an NVIDIA display/3D function, or one named only by the `Unknown
    header type` line (the device header above it)."""
    cls, name = e.detail.get("class", ""), e.detail.get("name", "")
    return (not cls and not name) or (bool(_GPU_CLASS.search(cls)) and "NVIDIA" in name.upper())


def fell_off_bus(c: Collected, n: Namer) -> list[Hyp]:
    lost = xids(c, {79}) + c.of("fell_off_bus")
    nvml_lost = c.of("gpu_lost")
    config = [e for e in c.of("pci_config_lost") if _is_gpu(e)]
    unreachable = c.of("nvsmi_error")
    surprise = c.of("aer_surprise_down")
    aer = [e for e in c.of("aer") if (e.code or 0) >= 1]
    out = per_component(
        lost,
        n.gpu,
        "gpu_fell_off_bus",
        0.95 if surprise else 0.93,
        "the GPU stopped answering on PCIe (Xid 79 / 'fallen off the bus')",
        "GPU has fallen off the bus",
        ("PCIe AER uncorrected error reported before the GPU was lost", aer),
        ("PCIe AER Surprise Down on the GPU's upstream port", surprise),
        ("the GPU's config space reads all ones", config),
    )
    out += per_component(
        nvml_lost,
        n.gpu,
        "gpu_fell_off_bus",
        0.85 if config or surprise else 0.75,
        "NVML reports the GPU lost (NVML_ERROR_GPU_IS_LOST: fallen off the bus or otherwise inaccessible)",
        "NVML: GPU is lost",
        ("the GPU's config space reads all ones", config),
        ("PCIe AER Surprise Down", surprise),
    )
    for comp, events in by(config, lambda e: e.component or "").items():
        joined = [e for e in unreachable + nvml_lost if e.component in (comp, None)]
        if joined:
            out.append(
                hyp(
                    "gpu_fell_off_bus",
                    n.gpu(events[0]),
                    0.85,
                    "the GPU's PCI config space reads all ones and nvidia-smi/NVML cannot reach it: the board no "
                    "longer answers on the bus",
                    ("config space reads all ones (lspci rev ff / Unknown header type 7f)", events),
                    ("nvidia-smi / NVML cannot reach the GPU", joined),
                )
            )
        else:
            out.append(
                hyp(
                    "gpu_fell_off_bus",
                    n.gpu(events[0]),
                    0.5,
                    "the GPU's PCI config space reads all ones: lost from the bus, or powered down by runtime "
                    "power management (switchable GPUs read the same); nvidia-smi on the GPU tells them apart",
                    ("config space reads all ones (lspci rev ff / Unknown header type 7f)", events),
                )
            )
    named = {e.component for e in config}
    out += per_component(
        [e for e in unreachable if e.component and e.component not in named],
        n.gpu,
        "gpu_fell_off_bus",
        0.45,
        "nvidia-smi cannot read this GPU (no handle for it, or ERR! in its fields): lost from the bus, or the "
        "driver could not initialise it; its config space (lspci) and the kernel log tell them apart",
        "nvidia-smi cannot read the GPU",
    )
    out += _failed_recovery(c, n, aer, surprise)
    if not out:
        out = anchored(
            surprise,
            n.node,
            "gpu_fell_off_bus",
            0.55,
            "a PCIe link went down unexpectedly (AER Surprise Down); no GPU-side message ties it to a GPU",
            "PCIe AER Surprise Down",
        )
    return merge(out)


def _failed_recovery(c: Collected, n: Namer, aer: list[LogEvent], surprise: list[LogEvent]) -> list[Hyp]:
    """A fatal AER the kernel could not recover: on the GPU whose driver cannot recover it, else the port."""
    fatal = [e for e in aer if e.code == 2]
    failed = c.of("aer_recovery_failed")
    if not fatal or not failed:
        return []
    stuck = [e for e in c.of("aer_cant_recover") if "nvidia" in e.raw]
    timeout = [e for e in c.of("aer_detail") if _COMPLETION_TIMEOUT.search(e.raw)]
    target = stuck[0] if stuck else failed[0]
    # without the GPU's own line (its driver `can't recover`), the device behind the port may be any device
    confidence = (0.8 if surprise or timeout else 0.7) if stuck else 0.5
    return [
        hyp(
            "gpu_fell_off_bus",
            n.gpu(target),
            confidence,
            "a fatal PCIe error on the GPU's link that the kernel could not recover (AER device recovery failed"
            + ("; the link dropped: Surprise Down" if surprise else "")
            + ("; completion timeouts" if timeout else "")
            + "): the GPU is off the bus until a reset",
            ("fatal uncorrected AER", fatal),
            ("PCIe AER Surprise Down", surprise),
            ("completion timeout", timeout),
            ("AER recovery failed", failed),
            ("the GPU's driver cannot recover it", stuck),
        )
    ]
