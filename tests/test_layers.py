"""Import rules between layers, checked on the source (every import statement, inside functions too).

aiops.datapath is the only code that writes the kernel's datapath: it builds on aiops.errors alone, so the
control layer, the simulator and the collectors can use it without a cycle. Collectors read; they never
import the control layer, the simulator or the guardrails (the simulator's adapter lives in aiops.sim).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("aiops", "collectors", "guardrails", "evals", "bench", "bpf", "tests")


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return {name for name in names if name.split(".")[0] in FIRST_PARTY}


def within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == package or name.startswith(package + ".") for package in packages)


def modules(package: str) -> list[Path]:
    found = sorted((ROOT / package.replace(".", "/")).rglob("*.py"))
    assert found, package
    return found


@pytest.mark.parametrize("path", modules("aiops.datapath"), ids=lambda p: p.name)
def test_the_datapath_imports_only_itself_and_errors(path: Path) -> None:
    allowed = ("aiops.datapath", "aiops.errors")
    outside = {name for name in imports_of(path) if name != "aiops" and not within(name, allowed)}
    assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"


@pytest.mark.parametrize("path", modules("collectors"), ids=lambda p: str(p.relative_to(ROOT)))
def test_collectors_import_no_control_sim_or_guardrails(path: Path) -> None:
    forbidden = ("aiops.control", "aiops.sim", "guardrails")
    found = {name for name in imports_of(path) if within(name, forbidden)}
    assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"
