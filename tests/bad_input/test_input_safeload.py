"""The safe loader's limits (aiops/safeload.py): depth, alias-expanded node count, size, safe loaders only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from aiops import safeload
from aiops.errors import InputError, ScenarioError
from tests.bad_input.test_input_files import alias_bomb


def test_depth_at_the_limit_loads_and_one_past_it_does_not() -> None:
    at_limit = "[" * safeload.MAX_DEPTH + "]" * safeload.MAX_DEPTH
    assert safeload.parse_yaml(at_limit, "f.yaml", ScenarioError) is not None
    assert safeload.parse_json(at_limit, "f.json", ScenarioError) is not None
    past = "[" + at_limit + "]"
    with pytest.raises(ScenarioError, match=r"f.yaml: field '\(file\)': nested deeper than the limit of 32"):
        safeload.parse_yaml(past, "f.yaml", ScenarioError)
    with pytest.raises(ScenarioError, match=r"f.json: field '\(file\)': nested deeper than the limit of 32"):
        safeload.parse_json(past, "f.json", ScenarioError)


def test_brackets_inside_json_strings_do_not_count_as_nesting() -> None:
    text = '{"name": "' + "[" * 100 + '\\"' + "{" * 100 + '"}'
    assert safeload.parse_json(text, "f.json", InputError)["name"].startswith("[[[")


def test_aliases_count_what_they_expand_to() -> None:
    with pytest.raises(InputError, match="more than the limit of 100000 nodes"):
        safeload.parse_yaml(alias_bomb(), "bomb.yaml", InputError)
    small = "a: &x [1, 2]\nb: *x\n"
    assert safeload.parse_yaml(small, "ok.yaml", InputError) == {"a": [1, 2], "b": [1, 2]}


def test_only_safe_loaders_build_objects() -> None:
    with pytest.raises(TypeError):
        safeload.parse_yaml("a: 1", "f.yaml", InputError, yaml.UnsafeLoader)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="not valid YAML"):
        safeload.parse_yaml("!!python/object/apply:os.system ['true']", "f.yaml", InputError)


def test_the_shipped_yaml_reads_the_same_through_libyaml_and_the_pure_python_parser() -> None:
    """`parse_yaml` and `safe_load` read through libyaml where PyYAML has it (a tenth of the CPU): every YAML
    file the package ships (public scenarios, playbooks, policies) gives what `yaml.SafeLoader` gives."""
    if yaml.__with_libyaml__:
        assert safeload._parser_for(yaml.SafeLoader) is yaml.CSafeLoader
    root = Path(__file__).resolve().parents[2]
    shipped = [
        p
        for top in ("evals", "playbooks", "guardrails", "aiops")
        for p in sorted((root / top).rglob("*.y*ml"))
    ]
    assert len(shipped) > 150
    for path in shipped:
        text = path.read_text(encoding="utf-8")
        pure = yaml.load(text, Loader=yaml.SafeLoader)
        assert safeload.safe_load(text) == pure, path
        assert safeload.parse_yaml(text, str(path), InputError) == pure, path
