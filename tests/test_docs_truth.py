"""The docs do not call built things unbuilt (issue 22, item 6):
- no sentence of README.md, docs/*.md or a deploy/* comment that says "not built" (or "not built yet", "isn't built", "does not
  exist yet") names a command the CLI has (`aiops <command> [<subcommand>]`, from the argparse parser itself)
  or one of the features below that such a command is;
- every `docs/X.md, "Heading"` reference in deploy/* and deploy/ (chart, Grafana) names a heading that exists;
- the set-up lines of docs/SECURITY.md run, in order, on a fresh host (a temporary HOME)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from aiops.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_BUILT = re.compile(r"\bnot built\b|\bisn't built\b|\bis not yet built\b|\bdoes not exist yet\b", re.I)
# What a command is called in prose, besides `aiops <command>` (each key must be a command: checked below).
FEATURES = {
    "report": ("scheduled report", "scheduled health report", "health report"),
    "console": ("web console",),
    "profile": ("flame graph",),
    "investigate": ("log evidence", "prometheus evidence"),
    "run": ("node service",),
    "audit": ("audit witness",),
    "actions": ("signed approval",),
}


def commands(parser: argparse.ArgumentParser | None = None, prefix: str = "aiops") -> set[str]:
    """`aiops report`, `aiops actions approve`, ...: every command and subcommand of the CLI."""
    parser = parser or build_parser()
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.add(f"{prefix} {name}")
                found |= commands(sub, f"{prefix} {name}")
    return found


def sentences(text: str) -> list[str]:
    """A doc's sentences: paragraphs (blank lines and code fences end them) joined and split after . ! ?"""
    paragraphs, current, fenced = [], [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not line.strip() or line.startswith(("```", "#", "|")):
            paragraphs.append(" ".join(current))
            current = []
            if line.startswith("|"):  # a table row is its own paragraph
                paragraphs.append(line)
            continue
        current.append(line.strip())
    paragraphs.append(" ".join(current))
    return [s for p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`*(])", p) if s]


def false_claims(text: str, known: set[str]) -> list[str]:
    """The "not built" sentences that name a command the CLI has, or a feature that command is."""
    wrong = []
    for sentence in sentences(text):
        if NOT_BUILT.search(sentence) is None:
            continue
        flat = sentence.replace("`", "").lower()
        named = {c for c in known if re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", flat)}
        named |= {f"aiops {c}" for c, phrases in FEATURES.items() for p in phrases if p in flat}
        if named:
            wrong.append(f"{sorted(named)}: {sentence}")
    return wrong


def test_the_feature_table_names_real_commands() -> None:
    known = commands()
    assert {"aiops run", "aiops report", "aiops actions approve", "aiops console adduser"} <= known
    assert {f"aiops {c}" for c in FEATURES} <= known


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(ROOT)) for d in DOCS])
def test_no_doc_calls_a_built_command_unbuilt(doc: Path) -> None:
    assert false_claims(doc.read_text(encoding="utf-8"), commands()) == []


def deploy_files() -> list[Path]:
    """Every text file of deploy/: the unit, the Containerfile, the manifests, the Helm chart, Grafana's."""
    return [p for p in sorted((ROOT / "deploy").rglob("*")) if p.is_file() and p.suffix != ".json"]


def test_no_deploy_file_calls_a_built_command_unbuilt() -> None:
    for path in deploy_files():
        comments = [
            line.split("#", 1)[1].strip()
            for line in path.read_text(encoding="utf-8").splitlines()
            if "#" in line
        ]
        assert false_claims("\n".join(comments), commands()) == [], path.name


def test_the_check_finds_a_planted_claim() -> None:
    """The check can fail: the sentence that started this test, in any of its shapes, is found."""
    known = commands()
    for planted in (
        "`aiops report` is not built yet.",
        "Not built yet: scheduled health reports; an HTTP DCIM input.",
        'Intro.\n`aiops run` itself is not built yet (README, "Not built\nyet"); these files are ahead of it.',
        "The web console isn't built.",
    ):
        assert false_claims(f"# Title\nSome text. {planted} More text.\n", known), planted
    honest = "Not built: OIDC sign-in; rate limits per source address. `aiops report` writes reports."
    assert false_claims(honest, known) == []


def _headings(doc: Path) -> list[str]:
    return [
        line.lstrip("#").strip()
        for line in doc.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    ]


REFERENCE = re.compile(r"(docs/[\w-]+\.md),\s*(?:\"([^\"]+)\"|([A-Z][\w ]*?)\))")


def test_deploy_files_point_to_headings_that_exist() -> None:
    checked = 0
    for path in deploy_files():
        text = " ".join(line.lstrip("# ").strip() for line in path.read_text(encoding="utf-8").splitlines())
        for doc, quoted, bare in REFERENCE.findall(text):
            heading = quoted or bare
            assert (ROOT / doc).is_file(), (path.name, doc)
            assert any(h == heading or h.startswith(heading + " ") for h in _headings(ROOT / doc)), (
                f"{path.name} points to {doc}, {heading!r}: no such heading"
            )
            checked += 1
    assert checked >= 6


def test_the_security_set_up_lines_run_on_a_fresh_host(tmp_path: Path) -> None:
    """docs/SECURITY.md's set-up block, in order, in an empty HOME; /etc/aiops is moved under tmp_path and
    `sudo` dropped (the test must not write /etc), ssh-keygen asked for no passphrase (no terminal here)."""
    if shutil.which("ssh-keygen") is None:
        pytest.fail("ssh-keygen is needed (openssh-client), as for signed approvals")
    text = (ROOT / "docs" / "SECURITY.md").read_text(encoding="utf-8")
    block = text.split("**Set-up on a fresh host**", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    etc = tmp_path / "etc" / "aiops"
    script = (
        block.replace("/etc/aiops", str(etc))
        .replace("sudo ", "")
        .replace("ssh-keygen -t ed25519", "ssh-keygen -N '' -q -t ed25519")
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env["HOME"] = str(home)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # this checkout's aiops
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "approved (approved by alice)" in done.stdout
    assert (
        (etc / "allowed_signers").read_text(encoding="utf-8").startswith('alice namespaces="aiops-approval" ')
    )
