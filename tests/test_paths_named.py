"""Every test path the project's text names exists: docs, code comments, `SLOW_FIRST` (tests/conftest.py) and
test modules that import each other name tests by path or module, and the tests live by subject in folders
(docs/ARCHITECTURE.md, "Layout"), so a file moved or renamed leaves no stale name behind, nor does a branch
written before the move."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"\btests/(?:[a-z_]+/)*test_[a-z0-9_]+\.py\b|\btests\.(?:[a-z_]+\.)*test_[a-z0-9_]+\b")
PLACEHOLDERS = {"tests/test_x.py"}  # README's "one module alone" example


def test_every_test_path_the_text_names_exists() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    stale: list[str] = []
    for name in files.split():
        path = ROOT / name
        if (
            path.suffix not in (".py", ".md", ".toml", ".yaml", ".yml", ".c", ".txt", "")
            or not path.is_file()
        ):
            continue
        text = path.read_text(errors="replace")
        for found in set(NAMED.findall(text)):
            target = found if found.endswith(".py") else found.replace(".", "/") + ".py"
            if target not in PLACEHOLDERS and not (ROOT / target).is_file():
                stale.append(f"{name}: {found}")
    assert not stale, "names of tests that are not there (moved? renamed?):\n" + "\n".join(sorted(stale))
