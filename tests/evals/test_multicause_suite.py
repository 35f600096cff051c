"""Issue 14, item 1: what the public suite holds for several causes (two-fault cases, decoys, transients, 6 h
of healthy runs over several shapes) and what `evals/generate.py --two-faults` makes for unseen seeds. The
suite's figures themselves come from `aiops eval` on the installed wheel (tests/test_packaging.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from aiops.scenarios import load_scenario
from evals.harness import PUBLIC_SUITE, suite_files

ROOT = Path(__file__).resolve().parents[2]


def test_the_public_suite_holds_six_hours_of_healthy_runs_over_several_shapes() -> None:
    healthy = [s for s in map(load_scenario, suite_files(PUBLIC_SUITE)) if not s.faults]
    assert sum(s.duration_s for s in healthy) >= 6 * 3600
    shapes = {
        (s.cluster.racks, s.cluster.nodes_per_rack, s.cluster.gpus_per_node, s.cluster.nics_per_node)
        for s in healthy
    }
    assert len(shapes) >= 3
    assert all(s.expected.root_cause == "healthy" for s in healthy)


def test_generated_two_fault_cases_are_independent_and_differ_per_seed(tmp_path: Path) -> None:
    made = {}
    for seed in (31, 32):
        out = tmp_path / str(seed)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "evals.generate",
                "--out",
                str(out),
                "--count",
                "0",
                "--seed",
                str(seed),
                "--two-faults",
                "8",
            ],
            check=True,
            cwd=ROOT,
            timeout=120,
        )
        scenarios = [load_scenario(p) for p in suite_files(out)]
        two = [s for s in scenarios if len(s.faults) == 2]
        assert len(two) == 8
        for s in two:
            first, second = s.faults
            assert second.start_s - first.start_s >= 100, s.name
            assert [(c.root_cause, c.component) for c in s.expected_causes] == [
                (f.kind, f.target) for f in s.faults
            ]
            assert first.target.split("/")[0] != second.target.split("/")[0], s.name
            assert second.duration_s is None or 60 <= second.duration_s <= 200
        made[seed] = sorted((f.kind, f.target) for s in two for f in s.faults)
    assert made[31] != made[32]
