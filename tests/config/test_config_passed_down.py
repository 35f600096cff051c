"""Issue 23, the high finding at its cause: the config a command is started with is loaded once, in aiops/cli,
and passed down. Below the CLI nothing calls `load_config`/`load_config_file` or reads $AIOPS_CONFIG or the
home directory's config for itself (that once made `aiops run --config FILE` enforce ~/.config's approvers)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("aiops", "guardrails", "collectors", "evals", "playbooks", "bpf", "bench")
LOADERS = {"load_config", "load_config_file"}
HOME_NAMES = {"USER_CONFIG_PATH"}


def _allowed(path: Path) -> bool:
    relative = path.relative_to(ROOT).as_posix()
    return relative.startswith("aiops/cli/") or relative == "aiops/config.py"


def _offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(tree):
        name = ""
        if isinstance(node, ast.Call):
            func = node.func
            name = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else ""
            )
            if name not in LOADERS:
                name = ""
        elif isinstance(node, ast.Name | ast.Attribute):
            ident = node.id if isinstance(node, ast.Name) else node.attr
            name = ident if ident in HOME_NAMES else ""
        elif isinstance(node, ast.Constant) and node.value == "AIOPS_CONFIG":
            name = "'AIOPS_CONFIG'"
        elif isinstance(node, ast.ImportFrom) and node.module == "aiops.config":
            imported = {a.name for a in node.names} & (LOADERS | HOME_NAMES)
            name = ", ".join(sorted(imported))
        if name:
            found.append(f"{shown}:{getattr(node, 'lineno', 0)}: {name}")
    return found


def test_only_the_cli_loads_the_config() -> None:
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100  # the tree was found
    offences = [o for p in files if not _allowed(p) for o in _offences(p)]
    assert offences == [], "the config is read below the CLI:\n" + "\n".join(offences)


def test_the_check_sees_a_call_below_the_cli(tmp_path: Path) -> None:
    """The checker itself: a module that loads the config by itself is named."""
    probe = ROOT / "guardrails" / "_probe_for_test.py"
    try:
        probe.write_text(
            "from aiops.config import load_config\n\ndef f():\n    return load_config().guardrails\n"
        )
        assert [o.split(": ")[1] for o in _offences(probe)] == ["load_config", "load_config"]
    finally:
        probe.unlink(missing_ok=True)
