"""Hostile files (issue 11, item 5): deeply nested YAML/JSON, alias bombs, oversized files and unbuildable
numbers are a one-line error naming the file (exit 2) in every command that reads them, never a
RecursionError or a traceback. On the code before the safe loader, the nested files crashed `policy show`,
`lanes try`, `lanes apply`, `dcim watch` and `simulate` with RecursionError."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from aiops.cli.main import main

SMALL_SCENARIO = (
    "name: tiny\nduration_s: 30\ncluster: {racks: 1, nodes_per_rack: 1, gpus_per_node: 2, nics_per_node: 1}\n"
)
NESTING = 5000  # far past Python's recursion limit (1000)


def deep_yaml() -> str:
    return "a: " + "{a: " * NESTING + "1" + "}" * NESTING + "\n"


def deep_flow_list() -> str:
    return "[" * NESTING + "]" * NESTING


def deep_block_yaml() -> str:
    return "".join("  " * i + "k:\n" for i in range(200)) + "  " * 200 + "v: 1\n"


def alias_bomb() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def huge_integer() -> str:
    return "duration_s: " + "9" * 5000 + "\n"


def deep_json() -> str:
    return '{"a": ' * NESTING + "1" + "}" * NESTING


HOSTILE: dict[str, Callable[[], str]] = {
    "deep_mapping.yaml": deep_yaml,
    "deep_list.yaml": deep_flow_list,
    "deep_block.yaml": deep_block_yaml,
    "alias_bomb.yaml": alias_bomb,
    "huge_integer.yaml": huge_integer,
    "deep_list.json": deep_flow_list,
    "deep_mapping.json": deep_json,
}


@pytest.fixture(scope="module")
def sim_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("sim")
    scenario = where / "s.yaml"
    scenario.write_text(SMALL_SCENARIO)
    db = where / "run.duckdb"
    assert main(["simulate", "--scenario", str(scenario), "--db", str(db)]) == 0
    return db


def _commands(path: Path, db: Path, tmp: Path) -> dict[str, list[str]]:
    return {
        "policy show": ["policy", "show", str(path), "--db", str(db)],
        "lanes try": ["lanes", "try", "--policy", str(path), "--duration-s", "5"],
        "lanes apply": ["lanes", "apply", "--dev", "lo", "--policy", str(path)],
        "dcim watch": ["dcim", "watch", "--file", str(path), "--once", "--db", str(db)],
        "simulate": ["simulate", "--scenario", str(path), "--db", str(tmp / "new.duckdb")],
        "simulate lanes policy": [
            "simulate",
            "--scenario",
            str(tmp / "ok.yaml"),
            "--lanes-policy",
            str(path),
            "--db",
            str(tmp / "new2.duckdb"),
        ],
    }


@pytest.mark.parametrize("name", sorted(HOSTILE))
@pytest.mark.parametrize(
    "command",
    ["policy show", "lanes try", "lanes apply", "dcim watch", "simulate", "simulate lanes policy"],
)
def test_hostile_files_exit_2_naming_the_file(
    command: str, name: str, sim_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ok.yaml").write_text(SMALL_SCENARIO)
    path = tmp_path / name
    path.write_text(HOSTILE[name]())
    code = main(_commands(path, sim_db, tmp_path)[command])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2, err
    assert str(path) in err and "Traceback" not in err


def test_oversized_file_is_refused_before_parsing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: big\ndescription: " + "x" * (2 << 20) + "\n")
    code = main(["simulate", "--scenario", str(path), "--db", str(tmp_path / "x.duckdb")])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"{path}: field '(file)': larger than the limit of" in err
    assert not (tmp_path / "x.duckdb").exists()
