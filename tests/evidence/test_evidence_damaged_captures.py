"""Issue 37 must-show, a property over the corpus (a seeded loop): any file of a failure case of evals/real (not
the sealed holdout), with its lines prefixed, reordered, cut at a random line or with a header line above the
failure cut, still gives a verdict that is not `healthy`.

"The original was a failure": the case's cause is not `healthy` and the untouched files are not read as
healthy. A cut keeps the lines the verdict cited (a capture that never reached the failure holds no
evidence of it). The seed and the transform of each run are in
the assertion message, so a failure reproduces."""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiops.evidence import investigate

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"
SEED = 37
PREFIXES = (
    "node7: ",
    "10.0.3.14: ",
    "2026-01-02T03:04:05.123456Z ",
    "[2026-01-02 03:04:05] ",
    "[1,3]<stdout>:",
    "[ 1234.567890] ",
    "[Fri Jan  2 03:04:05 2026] ",
    "Jan  2 03:04:05 node7 app[4242]: ",
    "kern  :err   : ",
)
_HEADER = re.compile(r"^\s*(?:[A-Z][\w /().-]{0,60}:?|[+|=-][-=+| ]{3,}.*|\S.{0,60}:)\s*$")

Lines = list[str]


def _cases() -> list[Path]:
    out = []
    for case in sorted(p for p in REAL.iterdir() if (p / "case.yaml").is_file()):
        if yaml.safe_load((case / "case.yaml").read_text(encoding="utf-8"))["cause"] != "healthy":
            out.append(case)
    return out


def _files(case: Path) -> list[Path]:
    return [case / str(n) for n in yaml.safe_load((case / "case.yaml").read_text(encoding="utf-8"))["files"]]


def _cited(result: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """The first and last line each file has cited (hypothesis evidence and findings)."""
    cites = [s for h in result["hypotheses"] for ev in h["evidence"] for s in ev["sources"]]
    cites += [f["source"] for f in result["findings"]]
    span: dict[str, tuple[int, int]] = {}
    for cite in cites:
        name, _, line = cite.rpartition(":")
        if line.isdigit():
            low, high = span.get(name, (10**9, 0))
            span[name] = (min(low, int(line)), max(high, int(line)))
    return span


def _prefixed(lines: Lines, _cited: tuple[int, int], rng: random.Random) -> Lines:
    prefix = rng.choice(PREFIXES)
    return [prefix + line for line in lines]


def _reordered(lines: Lines, _cited: tuple[int, int], rng: random.Random) -> Lines:
    out = list(lines)
    rng.shuffle(out)
    return out


def _head_cut(lines: Lines, cited: tuple[int, int], rng: random.Random) -> Lines:
    return lines[rng.randrange(0, cited[0]) :]  # starts at a random line at or above the first cited one


def _tail_cut(lines: Lines, cited: tuple[int, int], rng: random.Random) -> Lines:
    return lines[: rng.randrange(cited[1], len(lines) + 1)]  # ends at a random line at or below the last one


def _header_cut(lines: Lines, cited: tuple[int, int], rng: random.Random) -> Lines:
    above = [i for i in range(cited[0] - 1) if _HEADER.match(lines[i])] or list(range(cited[0] - 1))
    if not above:
        return list(lines)
    gone = rng.choice(above)
    return lines[:gone] + lines[gone + 1 :]


TRANSFORMS: dict[str, Callable[[Lines, tuple[int, int], random.Random], Lines]] = {
    "prefixed": _prefixed,
    "reordered": _reordered,
    "head-cut": _head_cut,
    "tail-cut": _tail_cut,
    "header-cut": _header_cut,
}
CASES = _cases()


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_a_damaged_failure_capture_is_never_healthy(tmp_path: Path, name: str) -> None:
    transform = TRANSFORMS[name]
    checked = 0
    for number, case in enumerate(CASES):
        files = _files(case)
        original = investigate(files)
        if original["verdict"] == "healthy":
            continue  # not a failure as read (no case of the corpus today)
        cited = _cited(original)
        rng = random.Random(SEED * 1000 + number)
        work = tmp_path / case.name
        work.mkdir()
        damaged = []
        for path in files:
            lines = path.read_text(encoding="utf-8").split("\n")
            lines = lines[:-1] if lines and lines[-1] == "" else lines
            low, high = cited.get(path.name, (len(lines), len(lines)))
            span = (max(min(low, len(lines)), 1), max(min(high, len(lines)), 1))
            out = work / path.name
            out.write_text("\n".join(transform(lines, span, rng)) + "\n", encoding="utf-8")
            damaged.append(out)
        verdict = investigate(damaged)["verdict"]
        assert verdict != "healthy", f"{case.name}: {name} (seed {SEED * 1000 + number}) read as healthy"
        checked += 1
    assert checked >= 80
