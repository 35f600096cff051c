"""A root-cause label is one unit: its spec (aiops/labels.py `SPECS`) says which pieces it has, and every layer's
registry must hold exactly those pieces: the symptom kinds detection reports (anchors), the analyst's scorers,
the evidence rules for files, the twin's fault models, the agent's re-checks and the playbooks. A registry that
names a label outside the vocabulary fails too. docs/ARCHITECTURE.md "Recipes" says where each piece goes.

Registered is not enough: each piece must work (`test_each_piece_of_a_label_works`). The playbook says what it
looks like and what to check, and its remediations fill into registry actions; the twin's fault, injected into a
small cluster, is detected and the analyst's scorer names the label among the first three hypotheses; an
evidence rule names the label first on at least one case of the real corpus (evals/real) that is its.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from aiops.agent.verify_checks import SUPPORT
from aiops.detect.kinds import SYMPTOM_KINDS
from aiops.evidence import rules_gpu, rules_net
from aiops.evidence.rules import EVIDENCE_RULES
from aiops.labels import (
    DIAGNOSIS_LABELS,
    EVIDENCE_ONLY_LABELS,
    FAULT_KINDS,
    SPEC,
    SPECS,
    TARGET_KINDS,
    Label,
    component_kind,
)
from aiops.models import Hypothesis
from aiops.pipeline import analyze_store
from aiops.playbooks import load_playbooks, remediation
from aiops.rca import fabric_scorers, gpu_scorers, rdma_scorers, throttle_scorers
from aiops.rca.scorers import SCORED_LABELS, SCORER_ENTRIES
from aiops.sim.fault_models import FAULT_MODELS, devices, fabric, thermal
from evals.real_harness import score_case
from guardrails.registry import DEFAULT_REGISTRY
from tests.simkit import run

ROOT = Path(__file__).resolve().parents[1]
VOCABULARY = frozenset(label.value for label in Label if label is not Label.HEALTHY)
EXAMPLE_COMPONENTS = {
    "fleet": "fleet",
    "rack": "rack0",
    "node": "node0",
    "gpu": "node0/gpu0",
    "nic": "node0/nic0",
    "policy": "policy:vip-collectives",
}
# a fault's target in tests/simkit.py's small cluster (2 racks x 2 nodes x 4 GPUs x 2 NICs), by component kind
TWIN_TARGETS = {"fleet": "fleet", "rack": "rack1", "node": "node1", "gpu": "node1/gpu2", "nic": "node1/nic0"}
REAL = ROOT / "evals" / "real"
# Labels with an evidence rule but no case in the real corpus yet (no public incident we found establishes one):
# their rule is shown working on an altered real capture by the named test instead. A label gains a real case,
# or an entry here; an entry whose label has a real case fails (it has its case).
NO_REAL_CASE = {
    "pcie_degraded": "tests/evidence/test_evidence_rules.py::test_narrow_link_is_diagnosed",
    "power_brake": "tests/evidence/test_evidence_rules.py::test_clock_event_reasons",
}


def _labels_named_in(module: ModuleType) -> set[str]:
    """Every label written as a string literal in the module's source (what its candidates or hypotheses can
    carry)."""
    tree = ast.parse(inspect.getsource(module))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in VOCABULARY
    }


def _with(flag: str) -> set[str]:
    return {spec.label for spec in SPECS if getattr(spec, flag)}


def test_every_label_has_one_spec_in_the_vocabulary_order() -> None:
    assert [spec.label for spec in SPECS] == [label.value for label in Label if label is not Label.HEALTHY]
    assert set(SPEC) == VOCABULARY and len(SPEC) == len(SPECS)
    assert tuple(DIAGNOSIS_LABELS) == tuple(spec.label for spec in SPECS)
    assert set(FAULT_KINDS) == _with("twin_fault") and VOCABULARY - set(FAULT_KINDS) == EVIDENCE_ONLY_LABELS


def test_targets_are_component_kinds() -> None:
    for spec in SPECS:
        assert spec.target_kinds, spec.label
        for kind in spec.target_kinds:
            assert component_kind(EXAMPLE_COMPONENTS[kind]) == kind, (spec.label, kind)
        assert TARGET_KINDS[spec.label] == spec.target_kinds


def test_anchors_are_symptom_kinds_detection_reports() -> None:
    for spec in SPECS:
        unknown = (spec.anchors | spec.shared_anchors | spec.paused_by) - SYMPTOM_KINDS
        assert not unknown, f"{spec.label}: anchors {sorted(unknown)} are no symptom kind of aiops/detect"
        assert not spec.anchors & spec.shared_anchors, spec.label
        # a cause the analyst scores from telemetry is dated by a symptom of its own
        assert bool(spec.anchors) == spec.scorer, f"{spec.label}: scorer without anchors, or anchors unused"


def test_detection_reports_exactly_the_registered_symptom_kinds() -> None:
    reported: set[str] = set()
    for path in sorted((ROOT / "aiops" / "detect").glob("*.py")):
        if path.name == "kinds.py":  # the registry and its builder
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            called = getattr(node.func, "id", None)
            # every rule builds its symptoms through the registry's builder, none by hand
            assert called != "Symptom", f"{path}:{node.lineno}: a Symptom built by hand, not by kinds.symptom"
            if called != "symptom":  # the registry's builder (aiops/detect/kinds.py)
                continue
            kinds = node.args[:1]
            assert kinds and isinstance(kinds[0], ast.Constant), f"{path}:{node.lineno}: kind not a literal"
            reported.add(str(kinds[0].value))
    assert reported == set(SYMPTOM_KINDS)


def test_a_symptom_of_an_undeclared_kind_is_refused() -> None:
    from aiops.detect.kinds import symptom

    assert symptom("gpu_hot", "node0/gpu0", 1.0, temp_c=90).detail == {"temp_c": 90}
    with pytest.raises(ValueError, match="gpu_warm"):
        symptom("gpu_warm", "node0/gpu0", 1.0)


def test_scorers_give_the_labels_their_specs_say() -> None:
    declared = {label for entry in SCORER_ENTRIES for label in entry.labels}
    assert declared <= VOCABULARY, (
        f"scorers name labels outside the vocabulary: {sorted(declared - VOCABULARY)}"
    )
    missing = _with("scorer") - set(SCORED_LABELS)
    assert not missing, (
        f"labels whose spec has a scorer but aiops/rca/scorers.py gives none: {sorted(missing)}"
    )
    extra = set(SCORED_LABELS) - _with("scorer")
    assert not extra, f"labels the analyst scores whose spec says scorer=False: {sorted(extra)}"
    # what each module's candidates can carry is what its registered scorers declare
    for module in (gpu_scorers, throttle_scorers, fabric_scorers, rdma_scorers):
        named = {
            label for e in SCORER_ENTRIES if e.scorer.__module__ == module.__name__ for label in e.labels
        }
        assert _labels_named_in(module) == named, module.__name__


def test_evidence_rules_give_the_labels_their_specs_say() -> None:
    declared = {label for entry in EVIDENCE_RULES for label in entry.labels}
    assert declared <= VOCABULARY, f"evidence rules name unknown labels: {sorted(declared - VOCABULARY)}"
    missing = _with("evidence_rule") - declared
    assert not missing, (
        f"labels whose spec has an evidence rule but aiops/evidence has none: {sorted(missing)}"
    )
    assert declared <= _with("evidence_rule"), sorted(declared - _with("evidence_rule"))
    for module in (rules_gpu, rules_net):
        named = {label for e in EVIDENCE_RULES if e.rule.__module__ == module.__name__ for label in e.labels}
        assert _labels_named_in(module) == named, module.__name__


def test_every_twin_fault_kind_has_one_fault_model() -> None:
    families = [thermal.MODELS, devices.MODELS, fabric.MODELS]
    assert sum(len(f) for f in families) == len(FAULT_MODELS), "a fault kind has models in two families"
    assert set(FAULT_MODELS) <= VOCABULARY, sorted(set(FAULT_MODELS) - VOCABULARY)
    missing = set(FAULT_KINDS) - set(FAULT_MODELS)
    assert not missing, f"fault kinds with no fault model in aiops/sim/fault_models: {sorted(missing)}"
    assert set(FAULT_MODELS) == set(FAULT_KINDS), "a fault model for a label the twin cannot inject"


# rows that each pass one telemetry check (tests/llm_agent/test_agent_verify_units.py has them one by one)
LOUD_ROWS: list[dict[str, Any]] = [
    {"temp_c": 91.0, "slowdown_temp_c": 90.0, "clocks_event_reasons": 0xFF, "thermal_samples": 3},
    {"xid": 79},
    {"xid": 48, "dbe": 3, "ref_dbe": 0},
    {"xid": 13},
    {"xid": 74, "nvlink_crc_total": 9},
    {"nvml_error": "GPU_IS_LOST", "nvml_errors": 4},
    {"power_limit_w": 400.0, "power_limit_max_w": 700.0, "power_cap_kw": 30.0, "brake_samples": 2},
    {"pcie_link_width": 8, "pcie_link_max_width": 16},
    {"carrier_changes": 2, "drops": 5, "ce_marks": 0, "link_up": False},
    {"traffic_class": "collective", "lane": "bulk", "tx_bytes": 100},
    {"traffic_class": "bulk", "tx_bytes": 100, "queue_ms": 9.0, "ref_queue_ms": 1.0},
    {"loader_ms": 900.0, "ref_loader_ms": 10.0, "idle_samples": 5},
    {"inlet_c": 40.0, "ref_inlet_c": 25.0, "min_flow_lpm": 10.0, "ref_flow_lpm": 60.0},
]


def test_every_label_has_one_agent_check_and_evidence_only_ones_pass_no_row() -> None:
    assert set(SUPPORT) == VOCABULARY, sorted(set(SUPPORT) ^ VOCABULARY)
    for spec in SPECS:
        what, check = SUPPORT[spec.label]
        passed = [row for row in LOUD_ROWS if check(row)]
        if spec.telemetry_check:
            assert passed, f"{spec.label}: its re-check passes none of the rows that show a fault"
        else:
            assert not passed and "evidence files only" in what, spec.label


def test_every_label_has_a_playbook() -> None:
    books = load_playbooks()
    missing = VOCABULARY - set(books)
    assert not missing, f"labels with no playbooks/<label>.yaml: {sorted(missing)}"
    assert set(books) <= VOCABULARY


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.label)
def test_a_label_is_one_unit(spec: Any) -> None:
    """One line per label: every piece its spec names is registered."""
    pieces = {
        "scorer": spec.label in SCORED_LABELS,
        "evidence_rule": any(spec.label in e.labels for e in EVIDENCE_RULES),
        "twin_fault": spec.label in FAULT_MODELS,
    }
    for piece, present in pieces.items():
        assert present == getattr(spec, piece), f"{spec.label}: spec {piece}={getattr(spec, piece)}"
    assert spec.label in SUPPORT and spec.label in load_playbooks()


def _real_cases(label: str) -> list[Path]:
    return sorted(
        p.parent
        for p in REAL.glob("*/case.yaml")
        if re.search(rf"^cause:\s*{label}\s*$", p.read_text(encoding="utf-8"), re.MULTILINE)
    )


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.label)
def test_each_piece_of_a_label_works(spec: Any) -> None:
    """Each piece the spec names does its work for the label (an empty playbook, a fault model that changes
    nothing, a scorer that never answers, an evidence rule that never matches: each fails here)."""
    book = load_playbooks()[spec.label]
    assert book.title and book.signature.supports and book.checks, f"{spec.label}: an empty playbook"
    component = EXAMPLE_COMPONENTS[spec.target_kinds[0]]
    hypothesis = Hypothesis(root_cause=spec.label, component=component, confidence=0.9, summary="unit")
    actions = remediation(hypothesis, "j")
    assert actions, f"{spec.label}: its playbook remediates nothing"
    for action in actions:
        assert action.kind in DEFAULT_REGISTRY.kinds and "{" not in action.target, (spec.label, action)
    if spec.twin_fault:
        target = TWIN_TARGETS[spec.target_kinds[0]]
        fault = {"kind": spec.label, "target": target, "start_s": 30.0, "severity": 0.8}
        store = run([fault], duration_s=110)
        try:
            result = analyze_store(store)
        finally:
            store.close()
        assert result.incidents, f"{spec.label}: the twin's fault on {target} opens no incident"
        if spec.scorer:
            named = [[h.root_cause for h in d.hypotheses[:3]] for d in result.diagnoses]
            assert any(spec.label in top3 for top3 in named), f"{spec.label}: the scorers answer {named}"
    if spec.evidence_rule:
        cases = _real_cases(spec.label)
        if spec.label in NO_REAL_CASE:
            assert not cases, f"{spec.label} has real cases: take it out of NO_REAL_CASE"
            path, _, name = NO_REAL_CASE[spec.label].partition("::")
            assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), NO_REAL_CASE[spec.label]
            return
        assert cases, f"{spec.label}: an evidence rule and no real case of evals/real to show it on"
        assert any(score_case(case)["right"] for case in cases), f"{spec.label}: no real case named first"


LISTS_NO_LABELS = ("aiops/causal.py", "aiops/evidence/next_steps.py", "evals/generate.py")


def test_label_lists_live_only_in_the_label_specs() -> None:
    """The modules that once kept their own lists of labels (which clocks-event reason each cause sets, which
    labels' playbooks a kind of abnormal line leads to, which kinds the suite generator pairs, which labels it
    draws on a lossless fabric or past the retry window) derive them from `SPECS`: no literal there is a label's
    name, in a collection or a comparison, so a new label is one spec."""
    root = Path(__file__).resolve().parents[1]
    names = set(DIAGNOSIS_LABELS)
    found = [
        f"{rel}:{leaf.lineno}: {leaf.value}"
        for rel in LISTS_NO_LABELS
        for leaf in ast.walk(ast.parse((root / rel).read_text()))
        if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) and leaf.value in names
    ]
    assert not found, found
