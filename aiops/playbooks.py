"""Playbooks (playbooks/*.yaml, one per root-cause label): signature, checks and safe remediations.

Remediations are typed proposals (`Proposal`): an action kind, a target template (`{component}`, `{node}`,
`{job}`), parameters and whether the action is physical. Executing them is the guardrails' business.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from aiops.errors import AiopsError
from aiops.labels import FAULT_KINDS, node_of
from aiops.models import Hypothesis, Proposal

PLAYBOOK_DIR = Path(__file__).resolve().parent.parent / "playbooks"


class Remediation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    action: str
    target: str
    parameters: dict[str, Any] = {}
    physical: bool
    reason: str


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    supports: list[str]
    refutes: list[str]


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    label: str
    title: str
    signature: Signature
    checks: list[str]
    remediations: list[Remediation]


class PlaybookError(AiopsError):
    exit_code = 2


@cache
def load_playbooks(directory: Path = PLAYBOOK_DIR) -> dict[str, Playbook]:
    books: dict[str, Playbook] = {}
    for path in sorted(directory.glob("*.yaml")):
        try:
            book = Playbook.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        except (ValidationError, yaml.YAMLError) as exc:
            raise PlaybookError(f"{path}: not a valid playbook: {exc}") from exc
        if book.label not in FAULT_KINDS:
            raise PlaybookError(
                f"{path}: field 'label': unknown label '{book.label}' (allowed: {', '.join(FAULT_KINDS)})"
            )
        books[book.label] = book
    return books


def _fill(template: str, hypothesis: Hypothesis, job: str | None) -> str:
    node = node_of(hypothesis.component) or hypothesis.component
    return template.format(
        component=hypothesis.component, node=node, job=f"job:{job}" if job else "job:unknown"
    )


def proposals_for(hypothesis: Hypothesis, job: str | None = None) -> list[Proposal]:
    book = load_playbooks().get(hypothesis.root_cause)
    if book is None:
        return []
    out = []
    for r in book.remediations:
        params = {
            k: (_fill(v, hypothesis, job) if isinstance(v, str) else v) for k, v in r.parameters.items()
        }
        out.append(
            Proposal(
                action=r.action,
                target=_fill(r.target, hypothesis, job),
                parameters=params,
                reason=r.reason,
                physical=r.physical,
            )
        )
    return out
