from __future__ import annotations

from pathlib import Path

import pytest

from aiops.errors import PlaybookError
from aiops.labels import DIAGNOSIS_LABELS
from aiops.models import Hypothesis
from aiops.playbooks import load_playbooks, remediation
from guardrails.registry import DEFAULT_REGISTRY, Risk


def test_every_label_has_a_playbook_with_signature_checks_and_typed_remediations() -> None:
    books = load_playbooks()
    assert set(books) == set(DIAGNOSIS_LABELS)
    for label, book in books.items():
        assert book.signature.supports and book.checks and book.remediations, label
        for r in book.remediations:
            spec = DEFAULT_REGISTRY.get(r.action)
            assert spec is not None, (label, r.action)
            assert r.physical == (spec.risk is Risk.PHYSICAL), (label, r.action)


def test_proposals_fill_targets_from_the_hypothesis() -> None:
    h = Hypothesis(root_cause="gpu_fell_off_bus", component="node4/gpu3", confidence=0.9, summary="lost")
    actions = remediation(h, job="llm")
    # the ladder: requeue the job without the node, drain it, reboot it, then the RMA (bundle and ticket)
    assert [a.target for a in actions] == ["job:llm", "node4", "node4", "node4", "node4/gpu3"]
    assert [a.kind for a in actions][:3] == ["restart_job", "drain_node", "reboot_node"]
    assert all(DEFAULT_REGISTRY.kinds[a.kind].physical for a in actions[:3])
    assert all(a.proposed_by == "analyst" and a.proposal_id.startswith("draft-") for a in actions)
    assert actions[0].parameters == {"from_checkpoint": "latest", "exclude": "node4"}
    assert actions[4].parameters["team"] == "rma" and "node4/gpu3" in actions[4].parameters["summary"]
    assert remediation(Hypothesis(root_cause="healthy", component="", confidence=1.0, summary="")) == []


def test_a_malformed_playbook_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "label: nope\ntitle: x\nsignature: {supports: [], refutes: []}\nchecks: []\nremediations: []\n"
    )
    load_playbooks.cache_clear()
    try:
        with pytest.raises(PlaybookError, match=r"bad.yaml: field 'label': unknown label 'nope'"):
            load_playbooks(tmp_path)  # type: ignore[arg-type]
    finally:
        load_playbooks.cache_clear()
