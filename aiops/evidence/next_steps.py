"""What to run next: the one to three checks that would confirm or rule out a verdict's top hypotheses, taken
from the labels' playbooks (`next_steps` in playbooks/<label>.yaml), with `{gpu}`, `{host}` and `{nic}` filled
from the hypothesis' component where it names them.

- Hypotheses: the top label's steps first, then the next label's, three at most (two labels: 2 + 1).
- No hypothesis but abnormal lines (`inconclusive` on findings): the playbooks of the labels each kind of line
  can lead to (`SYMPTOM_LABELS`: a failed CUDA call -> the application or the driver; a watchdog timeout -> the
  program or the network; an unknown Xid -> the driver ...).
- `healthy`: collect the whole bundle for the next time (`HEALTHY_STEPS`); abnormal lines no playbook
  covers (machine checks, say): the same bundle, to read with the lines found (`COLLECT_STEPS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from aiops.evidence.hyp import Hyp
from aiops.playbooks import load_playbooks

MAX_STEPS = 3

# Finding kinds -> the labels whose playbooks say how to tell the readings apart.
SYMPTOM_LABELS: dict[str, tuple[str, ...]] = {
    "cuda_error": ("application_error", "gpu_driver_firmware_fault"),
    "nccl_op_failed": ("application_error", "nic_link_flap"),
    "nccl_watchdog_timeout": ("application_error", "nic_link_flap"),
    "xid": ("gpu_driver_firmware_fault", "application_error"),
    "nvrm_error": ("gpu_driver_firmware_fault",),
    "init_failed": ("gpu_driver_firmware_fault", "gpu_fell_off_bus"),
    "gsp_timeout": ("gpu_driver_firmware_fault",),
    "gsp_error": ("gpu_driver_firmware_fault",),
    "aer": ("pcie_degraded", "gpu_fell_off_bus"),
    "aer_surprise_down": ("gpu_fell_off_bus",),
    "ib_completion_error": ("nic_link_flap", "roce_config_error"),
    "ib_async_event": ("nic_link_flap", "roce_config_error"),
    "ib_port_error": ("nic_link_flap",),
    "ib_port_state": ("nic_link_flap",),
    "nic_link": ("nic_link_flap",),
    "dcgm_health": ("thermal_throttle",),
    "clocks_event": ("thermal_throttle", "power_brake"),
    "gpu_unhealthy": ("gpu_driver_firmware_fault", "gpu_ecc_error"),
    "pcie_link_sta": ("pcie_degraded",),
    "reset_required": ("gpu_ecc_error", "gpu_driver_firmware_fault"),
    "fabric_state": ("gpu_driver_firmware_fault", "nvlink_degraded"),
    "gpu_lost": ("gpu_fell_off_bus",),
    "pci_config_lost": ("gpu_fell_off_bus",),
    "nvsmi_error": ("gpu_fell_off_bus", "gpu_driver_firmware_fault"),
    "aer_recovery_failed": ("gpu_fell_off_bus", "pcie_degraded"),
    "fm_error": ("gpu_driver_firmware_fault", "nvlink_degraded"),
    "dcgm_diag": ("gpu_ecc_error", "pcie_degraded"),
    "dcgm_overall": ("nvlink_degraded", "gpu_ecc_error"),
    "nvlink_links": ("nvlink_degraded",),
    "throttle_counter": ("thermal_throttle", "power_brake"),
    "error_counter": ("nic_link_flap", "roce_config_error"),
    "congestion_counter": ("roce_config_error", "nic_link_flap"),
    "netdev_down": ("nic_link_flap",),
    "gres_count_low": ("gpu_fell_off_bus", "gpu_driver_firmware_fault"),
    "ras_problem": ("application_error", "nic_link_flap"),
    "ras_group": ("application_error", "nic_link_flap"),
    "bad_reading": ("gpu_ecc_error", "thermal_throttle"),
}

HEALTHY_STEPS: tuple[dict[str, str | None], ...] = (
    {
        "run": "sudo nvidia-bug-report.sh",
        "shows": "nothing abnormal was in these files; if the problem recurs, the whole driver bundle (kernel "
        "log, nvidia-smi -q, lspci) is the next evidence to hand to `aiops investigate`",
        "for": None,
    },
)

COLLECT_STEPS: tuple[dict[str, str | None], ...] = (
    {
        "run": "sudo nvidia-bug-report.sh",
        "shows": "the whole driver bundle (kernel log around these lines, nvidia-smi -q, lspci) to hand to "
        "`aiops investigate` with these files: the lines found name no cause by themselves",
        "for": None,
    },
)

_GPU_INDEX = re.compile(r"/gpu(\d+)$")
_GPU_PCI = re.compile(r"/gpu@([0-9A-Fa-f:.]+)$")
_NIC = re.compile(r"/nic@([\w.-]+?)(?::\d+)?$")


def _fill(command: str, component: str) -> str:
    host = component.split("/", 1)[0]
    values = {"{host}": host}
    if (m := _GPU_INDEX.search(component)) is not None:
        values["{gpu_index}"] = values["{gpu}"] = m.group(1)
    elif (m := _GPU_PCI.search(component)) is not None:
        values["{gpu}"] = m.group(1)  # nvidia-smi -i takes a PCI bus id too; dcgmi's -i does not
    if (m := _NIC.search(component)) is not None:
        values["{nic}"] = m.group(1)
    for key, value in values.items():
        command = command.replace(key, value)
    command = command.replace("{gpu_index}", "<gpu id>")
    return command.replace("{gpu}", "<gpu>").replace("{nic}", "<hca>").replace("{host}", "<host>")


def steps_for(labels: Sequence[tuple[str, str]]) -> list[dict[str, str | None]]:
    """Steps for (label, component) pairs, most important first: 3 of one label, 2 + 1 of two (the first two
    distinct labels count). The console's incident page and the chat's explanation of an incident use it for
    the telemetry analyst's hypotheses too."""
    labels = _distinct(labels)
    books = load_playbooks()
    shares = [MAX_STEPS] if len(labels) == 1 else [MAX_STEPS - 1, 1]
    out: list[dict[str, str | None]] = []
    for (label, component), share in zip(labels, shares, strict=False):
        book = books.get(label)
        if book is None:
            continue
        for step in book.next_steps[:share]:
            out.append({"run": _fill(step.run, component), "shows": step.shows, "for": label})
    return out[:MAX_STEPS]


def _distinct(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for label, component in pairs:
        if label not in seen:
            seen.add(label)
            out.append((label, component))
    return out[:2]


def next_steps(
    verdict: str, found: Sequence[Hyp], finding_kinds: Sequence[str]
) -> list[dict[str, str | None]]:
    """One to three checks (`run`, `shows`, `for`: the label each one tests) for a verdict."""
    if verdict == "healthy":
        return list(HEALTHY_STEPS)
    if found:
        steps = steps_for([(h.root_cause, h.component) for h in found])
        if steps:
            return steps
    symptoms = _distinct((label, "") for kind in finding_kinds for label in SYMPTOM_LABELS.get(kind, ()))
    return (steps_for(symptoms) if symptoms else []) or list(COLLECT_STEPS)
