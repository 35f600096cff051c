"""The default `aiops demo` workspace (the built-in scenario), made once per test run (tests/shared_templates.py)
and copied for each module that needs one: eight modules made their own, at about 3 s of CPU each, the same
workspace every time (the simulation is seeded; its proposals are stamped with the wall time they were filed at,
valid for a day)."""

from __future__ import annotations

import shutil
from pathlib import Path

from aiops.cli.main import main
from tests.shared_templates import template


def _build(folder: Path) -> None:
    assert main(["demo", "--db", str(folder / "demo.duckdb"), "--json"]) == 0


def demo_copy(folder: Path, name: str = "demo.duckdb") -> Path:
    """A fresh copy of the demo workspace at `folder/name`, with every file of the workspace (its audit
    witness beside it), as `aiops demo --db folder/name --json` would leave it. The demo is made once per run
    (tests/shared_templates.py)."""
    source = template("demo", _build) / "demo.duckdb"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    for path in source.parent.glob(source.name + "*"):
        if path.is_file():
            shutil.copy(path, folder / (name + path.name.removeprefix(source.name)))
    return target
