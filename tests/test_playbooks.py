from __future__ import annotations

from pathlib import Path

import pytest

from aiops.labels import FAULT_KINDS
from aiops.models import Hypothesis
from aiops.playbooks import PlaybookError, load_playbooks, proposals_for

PHYSICAL = {
    "set_power_limit",
    "reset_power_limit",
    "set_clock_limit",
    "set_cooling_state",
    "set_fan_speed",
    "gpu_reset",
    "drain_node",
    "reboot_node",
    "migrate_job",
}
DIGITAL = {
    "set_lane_rate",
    "update_lane_rule",
    "enable_lanes",
    "enable_ecn",
    "open_ticket",
    "rerun_check",
    "restart_job",
}


def test_every_label_has_a_playbook_with_signature_checks_and_typed_remediations() -> None:
    books = load_playbooks()
    assert set(books) == set(FAULT_KINDS)
    for label, book in books.items():
        assert book.signature.supports and book.checks and book.remediations, label
        for r in book.remediations:
            assert r.action in PHYSICAL | DIGITAL, (label, r.action)
            assert r.physical == (r.action in PHYSICAL), (label, r.action)


def test_proposals_fill_targets_from_the_hypothesis() -> None:
    h = Hypothesis(root_cause="gpu_fell_off_bus", component="node4/gpu3", confidence=0.9, summary="lost")
    proposals = proposals_for(h, job="llm")
    assert [p.target for p in proposals] == ["node4", "node4", "job:llm"]
    assert proposals[2].parameters == {"exclude": "node4"}
    assert proposals_for(Hypothesis(root_cause="healthy", component="", confidence=1.0, summary="")) == []


def test_a_malformed_playbook_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(
        "label: nope\ntitle: x\nsignature: {supports: [], refutes: []}\nchecks: []\nremediations: []\n"
    )
    load_playbooks.cache_clear()
    try:
        with pytest.raises(PlaybookError, match=r"bad.yaml: field 'label': unknown label 'nope'"):
            load_playbooks(tmp_path)
    finally:
        load_playbooks.cache_clear()
