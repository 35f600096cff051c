"""The default `aiops demo` workspace (the built-in scenario), made once per test process and copied for each
module that needs one: eight modules made their own, at about 3 s of CPU each, the same workspace every time (the
simulation is seeded; its proposals are stamped with the wall time they were filed at, valid for a day)."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from aiops.cli.main import main

_TEMPLATE: dict[str, Path] = {}


def demo_copy(folder: Path, name: str = "demo.duckdb") -> Path:
    """A fresh copy of the demo workspace at `folder/name`, with every file of the workspace (its audit
    witness beside it), as `aiops demo --db folder/name --json` would leave it."""
    if "db" not in _TEMPLATE:
        root = Path(tempfile.mkdtemp(prefix="aiops-demo-template-"))
        atexit.register(shutil.rmtree, root, True)
        db = root / "demo.duckdb"
        assert main(["demo", "--db", str(db), "--json"]) == 0
        _TEMPLATE["db"] = db
    source = _TEMPLATE["db"]
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / name
    for path in source.parent.glob(source.name + "*"):
        if path.is_file():
            shutil.copy(path, folder / (name + path.name.removeprefix(source.name)))
    return target
