"""The docs do not call built things unbuilt (issue 22, item 6; issue 39):
- no sentence of README.md, docs/*.md or a deploy/* comment that says a thing is not built, in any of the ways
  prose says it (NOT_BUILT: "not built", "isn't built yet", "has not been built", "not yet implemented", "not
  wired", "does not exist yet", "yet to be built", "unimplemented", "TODO", ...; and every sentence under a
  heading or a lead-in such as "## Not built yet" or "Not built:"), names a command the CLI has (`aiops
  <command> [<subcommand>]`, from the argparse parser itself) or a feature of FEATURES, each of which is
  checked built here (a config it reads, a backend it routes to, a file it ships);
- every `docs/X.md, "Heading"` reference in deploy/* and deploy/ (chart, Grafana) names a heading that exists;
- the set-up lines of docs/SECURITY.md run, in order, on a fresh host (a temporary HOME)."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from aiops.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_NOT = r"(?:\bnot|n't|\bnever)"
_STATE = r"(?:built|implemented|wired(?:\s+(?:up|in))?|shipped|written|supported|done|available|in\s+place)"
NOT_BUILT = re.compile(
    rf"{_NOT}\s+(?:yet\s+|ever\s+)?(?:been\s+|be\s+)?(?:yet\s+)?{_STATE}\b"
    rf"|\b(?:does|do|did)\s*{_NOT}\s+exist\b|\bnon-?existent\b"
    r"|\b(?:yet|still|has|have|is|are)\s+to\s+be\s+(?:built|implemented|written|wired|done|added)\b"
    r"|\bun(?:built|implemented)\b|(?-i:\bTODO\b)|\bcoming\s+soon\b|\bfuture\s+work\b",  # todo.py is a module
    re.I,
)


@dataclass(frozen=True)
class Feature:
    """A thing the docs claim, the words prose calls it by, and the check that it is built."""

    phrases: tuple[str, ...]
    built: Callable[[], bool]
    where: str  # what the check looks at


def _command(name: str) -> Callable[[], bool]:
    return lambda: name in commands()


def _config_accepts(section: dict[str, object]) -> Callable[[], bool]:
    def check() -> bool:
        from aiops.config import parse_config

        parse_config(section, "features.toml")
        return True

    return check


def _scheduler(kind: str) -> Callable[[], bool]:
    def check() -> bool:
        from guardrails.routing import SCHEDULER_KINDS

        return bool(SCHEDULER_KINDS.get(kind))

    return check


def _sink(kind: str) -> Callable[[], bool]:
    def check() -> bool:
        from aiops.config_notify import WebhookKind

        return kind in typing.get_args(WebhookKind)

    return check


def _ticket_kinds() -> bool:
    from aiops.config_notify import TicketConfig

    kinds = typing.get_args(TicketConfig.model_fields["kind"].annotation)
    return {"jira", "servicenow"} <= set(kinds)


def _file(path: str) -> Callable[[], bool]:
    return lambda: (ROOT / path).is_file()


# What the docs call a built thing in prose (each is checked built by test_every_feature_is_built).
FEATURES: dict[str, Feature] = {
    "aiops report": Feature(
        ("scheduled report", "scheduled health report", "health report"), _command("aiops report"), "CLI"
    ),
    "aiops console": Feature(("web console",), _command("aiops console"), "CLI"),
    "aiops profile": Feature(("flame graph",), _command("aiops profile"), "CLI"),
    "aiops investigate": Feature(
        ("log evidence", "prometheus evidence"), _command("aiops investigate"), "CLI"
    ),
    "aiops run": Feature(("node service", "node agent"), _command("aiops run"), "CLI"),
    "aiops fleet": Feature(("fleet analyst",), _command("aiops fleet"), "CLI"),
    "aiops audit": Feature(("audit witness",), _command("aiops audit"), "CLI"),
    "aiops actions": Feature(("signed approval",), _command("aiops actions"), "CLI"),
    "aiops mcp": Feature(("mcp server",), _command("aiops mcp"), "CLI"),
    "http dcim": Feature(
        ("http dcim", "dcim url", "dcim over http", "dcim input", "dcim endpoint"),
        _config_accepts({"facility": {"dcim": "http://127.0.0.1:8080/api/dcim"}}),
        "[facility] dcim = an http(s):// URL",
    ),
    "slurm": Feature(
        ("slurm drain", "slurm actuator", "slurm backend", "scontrol"), _scheduler("slurm"), "routing"
    ),
    "kubernetes": Feature(
        ("kubernetes actuator", "kubernetes backend", "cordon", "eviction"),
        _scheduler("kubernetes"),
        "routing",
    ),
    "scheduler": Feature(
        ("cluster scheduler", "scheduler for drain", "scheduler actuator"),
        lambda: _scheduler("slurm")() and _scheduler("kubernetes")(),
        "routing",
    ),
    "pagerduty": Feature(
        ("pagerduty sink", "pagerduty events", "pagerduty delivery", "pages to pagerduty"),
        _sink("pagerduty"),
        "[[notify.webhooks]] kind",
    ),
    "slack": Feature(
        ("slack sink", "slack notification", "slack message", "slack webhook", "slack incoming webhook"),
        _sink("slack"),
        "[[notify.webhooks]] kind",
    ),
    "teams": Feature(
        ("teams sink", "teams notification", "teams webhook", "teams workflows"),
        _sink("teams"),
        "[[notify.webhooks]] kind",
    ),
    "alertmanager": Feature(
        ("alertmanager sink", "alertmanager webhook", "alertmanager receiver"),
        _sink("alertmanager"),
        "[[notify.webhooks]] kind",
    ),
    "tickets": Feature(("jira", "servicenow", "ticket sink"), _ticket_kinds, "[notify.ticket] kind"),
    "oidc": Feature(
        ("oidc sign-in", "openid connect", "single sign-on"), _file("aiops/console/oidc_signin.py"), "console"
    ),
    "helm": Feature(("helm chart",), _file("deploy/helm/aiops/Chart.yaml"), "deploy"),
    "maintenance": Feature(("maintenance window",), _command("aiops maintenance"), "CLI"),
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


def sentences(text: str) -> list[tuple[str, str]]:
    """A doc's sentences with the heading they stand under: paragraphs (blank lines, code fences and list
    items end them) joined and split after . ! ?"""
    paragraphs: list[tuple[str, str]] = []
    current: list[str] = []
    heading, fenced = "", False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        item = re.match(r"\s*(?:[-*+]|\d+\.)\s", line) is not None
        if fenced or not line.strip() or line.startswith(("```", "#", "|")) or item:
            paragraphs.append((heading, " ".join(current)))
            current = []
            if line.startswith("#") and not fenced:
                heading = line.lstrip("#").strip()
            if line.startswith("|"):  # a table row is its own paragraph
                paragraphs.append((heading, line))
            if not item:
                continue
        current.append(line.strip())
    paragraphs.append((heading, " ".join(current)))
    return [(h, s) for h, p in paragraphs for s in re.split(r"(?<=[.!?])\s+(?=[A-Z`*(])", p) if s]


_ASIDE = re.compile(r"\([^()]*\)")  # what a parenthesis says is context, not the claim
_VERB = re.compile(r"\s(?:is|are|was|were|has|have|does|do|can|cannot|stays?|only|but)\s|[:,]", re.I)


def _names(text: str, known: set[str]) -> set[str]:
    """The commands and features `text` names (a name followed by 's is about something of it, not it)."""
    flat = re.sub(r"\s+", " ", _ASIDE.sub("", text).replace("`", "").lower())
    after = r"(?![\w-])(?!['\u2019]s\b)"
    named = {c for c in known if re.search(rf"(?<![\w-]){re.escape(c)}{after}", flat)}
    return named | {
        name
        for name, feature in FEATURES.items()
        for p in feature.phrases
        if re.search(rf"(?<![\w-]){re.escape(p)}(?!['\u2019]s\b)", flat)
    }


def false_claims(text: str, known: set[str]) -> list[str]:
    """The sentences that say a command the CLI has, or a built feature, is not built: the sentence says so
    itself, or stands under a heading that does ("## Not built yet"), where each item's head is what it says
    is missing (`- A cluster scheduler for drain (the twin migrates); ...`)."""
    wrong = []
    for heading, sentence in sentences(text):
        if NOT_BUILT.search(sentence):
            named = _names(sentence, known)
        elif NOT_BUILT.search(heading):
            items = _ASIDE.sub("", _ASIDE.sub("", sentence)).split(";")
            heads = [_VERB.split(item.lstrip("-*+ "), 1)[0] for item in items]
            named = {n for head in heads for n in _names(head, known)}
        else:
            continue
        if named:
            wrong.append(f"{sorted(named)}: {sentence}")
    return wrong


def test_the_feature_table_names_real_commands() -> None:
    known = commands()
    assert {"aiops run", "aiops report", "aiops actions approve", "aiops console adduser"} <= known
    assert {name for name in FEATURES if name.startswith("aiops ")} <= known


@pytest.mark.parametrize("name", sorted(FEATURES))
def test_every_feature_is_built(name: str) -> None:
    """A feature of the table is built (its check looks at the code): the table never flags an honest line."""
    assert FEATURES[name].built(), f"{name}: not built ({FEATURES[name].where})"


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
        "The web console has not been built.",
        "The web console is not yet built.",
        "Scheduled reports are not yet implemented.",
        "The Slurm backend isn't wired up yet.",
        "A cluster scheduler for drain/migrate does not exist yet.",
        "PagerDuty delivery is yet to be built.",
        "`aiops mcp`: unimplemented.",
        "Not built:\nan HTTP DCIM input (files only).",
        "OIDC sign-in: TODO.",
    ):
        assert false_claims(f"# Title\nSome text. {planted} More text.\n", known), planted
    under = "# Title\n\n## Not built yet\n\n- Real actuators for a cluster scheduler (the twin migrates).\n"
    assert false_claims(under, known)
    honest = (
        "Not built: rate limits per source address; a forget command for removed nodes. "
        "`aiops report` writes reports. The NVML actuator has not yet run against a real GPU. "
        "Kprobes are not available on this kernel."
    )
    assert false_claims(honest, known) == []
    assert false_claims("# Not built\n\nThe twin migrates jobs.\n", known) == []


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
