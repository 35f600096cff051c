"""Numbers from the command line and scenario sizes (issue 11, item 5): negative, NaN, infinite and absurd
durations and intervals exit 2 before any work starts; a scenario's GPUs x duration x rate is checked before
the twin allocates anything, naming the limit. Before: `lanes try --duration-s -3` printed NaN and exited 0,
and a 65,536-GPU day-long scenario took 3.9 GB before writing a row."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.datapath.policy import load_default_policy
from aiops.errors import ScenarioError
from aiops.scenarios import parse_scenario
from aiops.sim.lanes_trial import try_policy


def exit_code(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit code of `aiops argv` (argparse's own exit included) and stderr, folded to one line."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("value", ["-3", "0", "nan", "inf", "-inf", "1e12", "abc"])
def test_lanes_try_refuses_a_bad_duration(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exit_code(["lanes", "try", f"--duration-s={value}", "--json"], capsys)
    assert code == 2 and "--duration-s" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["dcim", "watch", "--file", "x.json", "--interval-s=-1"],
        ["dcim", "watch", "--file", "x.json", "--interval-s=nan"],
        ["dcim", "watch", "--file", "x.json", "--max-rounds=-2"],
        ["lanes", "status", "--interval-s=0"],
        ["lanes", "control", "--dev", "lo", "--duration-s=-5"],
        ["lanes", "collect", "--dev", "lo", "--db", "x.duckdb", "--interval-s=-1"],
        ["lanes", "collect", "--dev", "lo", "--db", "x.duckdb", "--duration-s=inf"],
        ["run", "--duration-s=-1"],
        ["run", "--speed=0"],
        ["eval", "--workers=0"],
        ["lab", "net", "--phase-s=-8"],
    ],
    ids=lambda argv: " ".join(argv),
)
def test_negative_and_non_finite_numbers_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, err = exit_code(argv, capsys)
    assert code == 2 and "out of range" in err


def test_the_trial_refuses_a_bad_duration_without_the_cli() -> None:
    policy = load_default_policy()
    for duration_s in (-3.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(ScenarioError, match="--duration-s: field 'duration_s'"):
            try_policy(policy, None, duration_s)


def test_scenario_size_is_checked_before_allocating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(
        "name: huge\nduration_s: 86400\ncluster: {racks: 64, nodes_per_rack: 64, gpus_per_node: 16}\n"
    )
    db = tmp_path / "huge.duckdb"
    code, err = exit_code(["simulate", "--scenario", str(path), "--db", str(db)], capsys)
    assert code == 2
    assert f"{path}: field 'duration_s': 65,536 GPUs x 86400 s x 1 sample/s" in err
    assert "more than the limit of 20,000,000" in err and "duration_s <= 305 for 65,536 GPUs" in err
    assert not db.exists()


def test_negative_seeds_and_fault_times_are_refused() -> None:
    with pytest.raises(ScenarioError, match="field 'seed'"):
        parse_scenario({"name": "s", "seed": -1})
    with pytest.raises(ScenarioError, match=r"field 'faults\[0\].start_s'"):
        parse_scenario(
            {"name": "s", "faults": [{"kind": "thermal_throttle", "target": "node0/gpu0", "start_s": -1}]}
        )
