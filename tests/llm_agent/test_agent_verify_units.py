"""Units of aiops/agent/verify.py: the per-label support table, what a row mentions, the merge rule, parsing."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiops.agent.verify import SUPPORT, LLMHypothesis, mentions, merge, parse_hypotheses, refusal
from aiops.labels import DIAGNOSIS_LABELS


def test_every_diagnosis_label_has_a_support_check() -> None:
    assert set(SUPPORT) == set(DIAGNOSIS_LABELS)


@pytest.mark.parametrize(
    ("label", "supporting", "not_supporting"),
    [
        (
            "thermal_throttle",
            {"temp_c": 91.0, "slowdown_temp_c": 90.0},
            {"temp_c": 70.0, "slowdown_temp_c": 90.0},
        ),
        ("thermal_throttle", {"clocks_event_reasons": 0x20}, {"clocks_event_reasons": 0x4}),
        ("gpu_fell_off_bus", {"xid": 79}, {"xid": 13}),
        ("gpu_fell_off_bus", {"nvml_error": "GPU_IS_LOST"}, {"nvml_error": None}),
        # a neighbour timing out in the node-wide NVML hang did not fall off the bus
        (
            "gpu_fell_off_bus",
            {"nvml_error": "TIMEOUT", "xid": 79},
            {"nvml_error": "TIMEOUT", "nvml_errors": 3},
        ),
        (
            "power_cap_misconfig",
            {"power_limit_w": 400.0, "power_limit_max_w": 700.0},
            {"power_limit_w": 700.0, "power_limit_max_w": 700.0},
        ),
        ("nic_link_flap", {"carrier_changes": 2}, {"carrier_changes": 0}),
        ("ecn_misconfig", {"drops": 5, "ce_marks": 0}, {"drops": 5, "ce_marks": 40}),
        ("power_brake", {"clocks_event_reasons": 0x88}, {"clocks_event_reasons": 0x8}),
        ("facility_power_cap", {"power_cap_kw": 30.0}, {"power_cap_kw": None}),
        ("gpu_ecc_error", {"dbe": 3, "ref_dbe": 0}, {"dbe": 3, "ref_dbe": 3}),
        (
            "pcie_degraded",
            {"pcie_link_width": 8, "pcie_link_max_width": 16},
            {"pcie_link_width": 16, "pcie_link_max_width": 16},
        ),
        ("gpu_driver_firmware_fault", {}, {"xid": 79}),
    ],
)
def test_support_checks(label: str, supporting: dict[str, Any], not_supporting: dict[str, Any]) -> None:
    check = SUPPORT[label][1]
    assert check(supporting) is (label != "gpu_driver_firmware_fault")
    assert check(not_supporting) is False


def test_hostile_values_do_not_raise_or_support() -> None:
    for row in ({"xid": "79; DROP"}, {"xid": float("nan")}, {"clocks_event_reasons": -1}, {"temp_c": True}):
        assert not any(check(row) for _, check in SUPPORT.values()), row


def test_mentions() -> None:
    assert mentions({"gpu": "node3/gpu2"}, "node3/gpu2")
    assert mentions({"node": "node3", "gpu": "gpu2"}, "node3/gpu2")
    assert not mentions({"node": "node4", "gpu": "gpu2"}, "node3/gpu2")
    assert not mentions({"gpu": "node3/gpu22"}, "node3/gpu2")
    assert mentions({"rack": "rack1"}, "fleet") and not mentions({"node": "node1"}, "fleet")
    assert mentions({"rule_id": "r-2"}, "policy:r-2")


def _h(label: str, component: str, confidence: float) -> LLMHypothesis:
    return LLMHypothesis(label, component, confidence, status="verified")


def test_merge_never_displaces_the_analysts_first_or_same_component() -> None:
    analyst = [
        {"root_cause": "thermal_throttle", "component": "node1/gpu1", "confidence": 0.6},
        {"root_cause": "power_cap_misconfig", "component": "node1/gpu1", "confidence": 0.4},
    ]
    llm = [
        _h("gpu_fell_off_bus", "node0/gpu0", 0.99),  # another component: second, above the weaker analyst one
        _h("gpu_ecc_error", "node1/gpu1", 0.95),  # same component: below every analyst hypothesis on it
        _h("thermal_throttle", "node1/gpu1", 0.9),  # already there: not repeated
        LLMHypothesis("nic_link_flap", "node0/nic0", 0.99, status="unverified"),  # never merged
    ]
    merged = [(h["root_cause"], h["component"], h["source"]) for h in merge(analyst, llm)]
    assert merged == [
        ("thermal_throttle", "node1/gpu1", "analyst"),
        ("gpu_fell_off_bus", "node0/gpu0", "llm"),
        ("power_cap_misconfig", "node1/gpu1", "analyst"),
        ("gpu_ecc_error", "node1/gpu1", "llm"),
    ]
    assert merge([], [_h("nic_link_flap", "node0/nic0", 0.7)])[0]["source"] == "llm"


def test_parse_bounds_and_refusals() -> None:
    draft = {
        "hypotheses": [
            "junk",
            {"root_cause": 5, "component": None, "confidence": "high", "claims": "x"},
            *[{"root_cause": "gpu_fell_off_bus", "component": "node0/gpu0"}] * 20,
        ]
    }
    parsed = parse_hypotheses(draft, [])
    assert len(parsed) == 8 and parsed[0].status == "refused"
    assert parsed[1].confidence == 0.0 and parsed[1].claims == []
    topology = frozenset({"node0/gpu0", "node0"})
    assert refusal(parsed[1], topology) is not None and "is not a label" in str(refusal(parsed[1], topology))
    assert refusal(parsed[2], topology) is None


def test_chat_shows_each_model_hypothesis_with_its_status_as_plain_text() -> None:
    from io import StringIO

    from rich.console import Console

    from aiops.agent.session import Reply
    from aiops.cli.chat import show_reply

    reply = Reply("T", "q", "llm", "a", [], 0.0, [], [], "")
    reply.llm_hypotheses = [
        {
            "root_cause": "gpu_fell_off_bus",
            "component": "node0/gpu0",
            "status": "verified",
            "reason": "3 row(s)",
        },
        {
            "root_cause": "[bold]x[/bold]",
            "component": "node9/gpu9",
            "status": "refused",
            "reason": "not a label",
        },
    ]
    reply.hypotheses = [
        {"root_cause": "thermal_throttle", "component": "node1/gpu1", "source": "analyst"},
        {"root_cause": "gpu_fell_off_bus", "component": "node0/gpu0", "source": "llm"},
    ]
    out = StringIO()
    show_reply(Console(file=out, width=200, color_system=None), reply)
    text = out.getvalue()
    assert "model hypothesis verified gpu_fell_off_bus on node0/gpu0" in text
    assert "model hypothesis refused [bold]x[/bold] on node9/gpu9 (not a label)" in text
    assert "#2 gpu_fell_off_bus on node0/gpu0 (llm)" in text


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),
    st.text(max_size=20),
)
_COLUMNS = st.sampled_from(
    [
        "xid",
        "gpu",
        "node",
        "temp_c",
        "slowdown_temp_c",
        "clocks_event_reasons",
        "nvml_error",
        "drops",
        "ce_marks",
        "power_limit_w",
        "power_limit_max_w",
        "carrier_changes",
        "link_up",
        "traffic_class",
        "lane",
        "tx_bytes",
    ]
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(row=st.dictionaries(_COLUMNS, _SCALARS, max_size=8), confidence=_SCALARS)
def test_hostile_rows_and_confidences_never_raise(row: dict[str, Any], confidence: Any) -> None:
    for _, check in SUPPORT.values():
        assert isinstance(check(row), bool)
    assert isinstance(mentions(row, "node0/gpu0"), bool)
    [h] = parse_hypotheses(
        {"hypotheses": [{"root_cause": "x", "component": "y", "confidence": confidence}]}, []
    )
    assert 0.0 <= h.confidence <= 1.0
    assert parse_hypotheses({"hypotheses": [{"confidence": 10**400}]}, [])[0].confidence == 0.0
