"""evals/generate.py draws the twin's newer behaviours: a lossless (PFC) fabric in about 30 % of the cases (every
second healthy run and `ecn_misconfig` case among them), `nic_link_flap` severities up to 1.0 with every second
flap at 0.9 or more (outages past the IB transport retry window), and the same seed writes the same files;
the cases are drawn per label, so a new label changes no other label's cases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.scenarios import load_scenario
from evals import generate
from evals.generate import main
from evals.harness import suite_files


def _suite(out: Path, seed: int) -> dict[str, str]:
    main(["--out", str(out), "--count", "2", "--seed", str(seed), "--two-faults", "20"])
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


def test_same_seed_same_files_other_seed_other_files(tmp_path: Path) -> None:
    first = _suite(tmp_path / "a", 23)
    assert first == _suite(tmp_path / "b", 23)
    assert first != _suite(tmp_path / "c", 24)


def test_generated_suites_hold_lossless_fabrics_and_flaps_past_the_retry_window(tmp_path: Path) -> None:
    for seed in (21, 22, 23):
        _suite(tmp_path / str(seed), seed)
        scenarios = [load_scenario(p) for p in suite_files(tmp_path / str(seed))]
        lossless = [s for s in scenarios if s.fabric == "lossless"]
        assert 0.15 <= len(lossless) / len(scenarios) <= 0.5, (seed, len(lossless))
        assert any(not s.faults for s in lossless), seed  # a healthy lossless run
        assert any(len(s.faults) == 1 and s.faults[0].kind == "ecn_misconfig" for s in lossless), seed
        flaps = [f.severity for s in scenarios for f in s.faults if f.kind == "nic_link_flap"]
        assert max(flaps) <= 1.0 and any(v >= 0.9 for v in flaps) and any(v < 0.9 for v in flaps), seed
        assert any(s.fabric == "lossy" for s in scenarios if not s.faults), seed


def test_a_new_label_changes_no_other_label_s_cases(tmp_path: Path, monkeypatch: Any) -> None:
    """Cases are drawn per label (keyed by the seed and the label, not the label's position): a suite made
    without the first fault kind holds every other kind's cases unchanged, so adding a label changes none."""
    whole = _suite(tmp_path / "whole", 21)
    first = generate.FAULT_KINDS[0]
    monkeypatch.setattr(generate, "FAULT_KINDS", generate.FAULT_KINDS[1:])
    fewer = _suite(tmp_path / "fewer", 21)
    own = f"gen-{first.replace('_', '-')}-"
    assert {n: t for n, t in whole.items() if not n.startswith(own) and "-two-" not in n} == {
        n: t for n, t in fewer.items() if "-two-" not in n
    }
    assert any(n.startswith(own) for n in whole) and not any(n.startswith(own) for n in fewer)
