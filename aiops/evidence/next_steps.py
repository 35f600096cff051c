"""What to run next: the one to three checks that would confirm or rule out a verdict's top hypotheses, taken
from the labels' playbooks (`next_steps` in playbooks/<label>.yaml), with `{gpu}`, `{host}` and `{nic}` filled
from the hypothesis' component where it names them.

- Hypotheses: the top label's steps first, then the next label's, three at most (two labels: 2 + 1).
- No hypothesis but abnormal lines (`inconclusive` on findings): the playbooks of the labels each kind of line
  can lead to (`SYMPTOM_LABELS`, from the labels' `findings` in aiops/labels.py: a failed CUDA call -> the
  application or the driver; a watchdog timeout -> the program or the network; an unknown Xid -> the driver ...).
- `healthy`: collect the whole bundle for the next time (`HEALTHY_STEPS`); abnormal lines no playbook
  covers (machine checks, say): the same bundle, to read with the lines found (`COLLECT_STEPS`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from aiops.evidence.hypotheses import Hyp
from aiops.labels import FINDING_LABELS
from aiops.playbooks import load_playbooks

MAX_STEPS = 3

# Finding kinds -> the labels whose playbooks say how to tell the readings apart (the labels' `findings`).
SYMPTOM_LABELS = FINDING_LABELS

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
