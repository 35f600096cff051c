"""A fuzz suite (issue 11, item 6) over the files people hand us and the command line: scenario, response
policy, lanes policy and DCIM signal files, and the CLI's arguments. Every input either loads or is refused
with an InputError (exit 2, naming the file); nothing else may escape (no RecursionError, ValueError,
OverflowError, TypeError, KeyError ...). Documents are mutations of valid ones (a field replaced by any value:
nested, huge, NaN, wrong type) and raw text. Derandomized: CI sees the same examples on every run."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiops.cli.main import build_parser
from aiops.control.dcim_signals import load_dcim_file
from aiops.datapath.policy import DEFAULT_POLICY_PATH, load_policy
from aiops.errors import InputError
from aiops.scenarios import load_scenario
from guardrails.responses import DEFAULT_RESPONSES_PATH, load_response_policy

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

SCENARIO: dict[str, Any] = {
    "name": "fuzz",
    "seed": 7,
    "duration_s": 120,
    "cluster": {"racks": 2, "nodes_per_rack": 2, "gpus_per_node": 4, "nics_per_node": 2},
    "jobs": [
        {
            "name": "llm",
            "nodes": "all",
            "step_compute_s": 1.2,
            "allreduce_mb": 512,
            "checkpoint_every_s": 60,
            "checkpoint_gb": 40,
        }
    ],
    "lanes": "enabled",
    "faults": [
        {
            "kind": "thermal_throttle",
            "target": "node3/gpu1",
            "start_s": 30,
            "duration_s": None,
            "severity": 0.8,
        }
    ],
    "expect": {"root_cause": "thermal_throttle", "component": "node3/gpu1"},
}
LANES: dict[str, Any] = yaml.safe_load(DEFAULT_POLICY_PATH.read_text())
RESPONSES: dict[str, Any] = yaml.safe_load(DEFAULT_RESPONSES_PATH.read_text().replace("on:", "'on':"))
DCIM: dict[str, Any] = {"rack0": {"kw": 18}, "fleet": {"kw": 120}, "rack1": {"clear": True}}


HUGE = "HUGEINTEGER"
HUGE_DIGITS = "9" * 5000


def _leaf() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.just(HUGE),  # becomes an integer past Python's int-to-str digit limit in the file
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=12),
        st.sampled_from(
            ["all", "node0", "node3/gpu1", "rack0", "fleet", "vip", "bulk", "cgroup", "1e999", ""]
        ),
    )


ANY_VALUE = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8) | st.sampled_from(["kw", "lane"]), inner, max_size=4),
    ),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _paths(value, (*prefix, i))


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(doc, dict):
        return {**doc, head: _replace(doc[head], rest, value)}
    copy = list(doc)
    copy[head] = _replace(copy[head], rest, value)
    return copy


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> Any:
    """The base document with 1-3 of its fields (or new keys) replaced by any value."""
    doc: Any = base
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        if draw(st.booleans()) and path and isinstance(doc, dict):
            doc = _replace(doc, path, draw(ANY_VALUE))
        else:
            target = path + ((draw(st.text(max_size=6)),) if draw(st.booleans()) else ())
            try:
                doc = _replace(doc, target, draw(ANY_VALUE))
            except (KeyError, IndexError, TypeError):
                doc = _replace(doc, path, draw(ANY_VALUE))
    return doc


def _dump(doc: Any, as_json: bool) -> str:
    text = json.dumps(doc) if as_json else yaml.safe_dump(doc, default_flow_style=None, allow_unicode=True)
    return text.replace(f'"{HUGE}"', HUGE_DIGITS).replace(HUGE, HUGE_DIGITS)


RAW_TEXT = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="[]{}:,-&*!|>'\"#%@`? \n\t0123456789abcxyz", max_size=300),
    st.builds(
        lambda n, s: s * n,
        st.integers(1, 3000),
        st.sampled_from(["[", "{a: ", "- ", "&a [*a, ", "!!binary "]),
    ),
)


def _outcome(load: Callable[[Path], object], path: Path) -> None:
    """Loads, or an InputError (exit 2) that names the file; anything else fails the test with its traceback."""
    try:
        load(path)
    except InputError as exc:
        assert exc.exit_code == 2 and str(path) in str(exc)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="aiops-fuzz-") as name:
        yield Path(name)


LOADERS: dict[str, tuple[dict[str, Any], Callable[[Path], object]]] = {
    "scenario": (SCENARIO, load_scenario),
    "response_policy": (RESPONSES, load_response_policy),
    "lanes_policy": (LANES, load_policy),
    "dcim_signals": (DCIM, lambda p: load_dcim_file(p, 1000.0, ["rack0", "rack1"])),
}


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_fuzzed_documents_load_or_exit_2(kind: str, workdir: Path) -> None:
    base, load = LOADERS[kind]
    tried: list[str] = []

    @FUZZ
    @given(doc=mutated(base), as_json=st.booleans())
    def check(doc: Any, as_json: bool) -> None:
        path = workdir / f"{kind}.{'json' if as_json and kind == 'dcim_signals' else 'yaml'}"
        path.write_text(_dump(doc, as_json and kind == "dcim_signals"))
        tried.append(path.name)
        _outcome(load, path)

    check()
    assert len(tried) >= FUZZ.max_examples  # the examples ran (the suite's count: >= 500 in all)


@pytest.mark.parametrize("kind", sorted(LOADERS))
def test_fuzzed_text_loads_or_exit_2(kind: str, workdir: Path) -> None:
    _, load = LOADERS[kind]
    tried: list[str] = []

    @settings(FUZZ, max_examples=60)
    @given(text=RAW_TEXT, suffix=st.sampled_from([".yaml", ".json"]))
    def check(text: str, suffix: str) -> None:
        path = workdir / f"raw-{kind}{suffix}"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        tried.append(path.name)
        _outcome(load, path)

    check()
    assert len(tried) >= 60


NUMBER_OPTIONS = [
    ["lanes", "try", "--duration-s"],
    ["lanes", "status", "--interval-s"],
    ["lanes", "control", "--dev", "eth0", "--duration-s"],
    ["lanes", "collect", "--dev", "eth0", "--db", "x.duckdb", "--interval-s"],
    ["lanes", "collect", "--dev", "eth0", "--db", "x.duckdb", "--duration-s"],
    ["dcim", "watch", "--file", "x.json", "--interval-s"],
    ["dcim", "watch", "--file", "x.json", "--max-rounds"],
    ["run", "--speed"],
    ["run", "--duration-s"],
    ["eval", "--workers"],
    ["lab", "net", "--phase-s"],
    ["lab", "net", "--bottleneck-mbps"],
]
NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.text(alphabet="0123456789.-+eEinfa_x ", min_size=1, max_size=12),
)


PARSER = build_parser()


@FUZZ
@given(option=st.sampled_from(NUMBER_OPTIONS), value=NUMBER_TEXT)
def test_fuzzed_numbers_on_the_command_line(option: list[str], value: str) -> None:
    """Either a finite, in-range number reaches the command, or argparse exits 2 naming the option."""
    refusal = io.StringIO()
    try:
        with contextlib.redirect_stderr(refusal):
            args = PARSER.parse_args([*option[:-1], f"{option[-1]}={value}"])
    except SystemExit as exc:
        assert exc.code == 2 and option[-1] in refusal.getvalue()
        return
    number = getattr(args, option[-1].lstrip("-").replace("-", "_"))
    assert isinstance(number, int | float) and math.isfinite(number) and number >= 0
    assert isinstance(args, argparse.Namespace)
