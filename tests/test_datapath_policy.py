"""The lanes policy model and the CLI around it: validation errors, the pure classifier, prerequisites."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.datapath.policy import (
    DEFAULT_POLICY_PATH,
    Flow,
    PolicyError,
    classify,
    load_default_policy,
    load_policy,
    parse_policy,
)


def test_default_policy_has_the_contract_rule_ids() -> None:
    policy = load_default_policy()
    assert [r.rule_id for r in policy.rules] == [
        "collective-cgroup",
        "collective-dscp",
        "peer-prefix",
        "storage-prefix",
        "default",
    ]
    assert {r.match_kind for r in policy.rules} == {"cgroup", "dscp", "dst_prefix", "default"}


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "field", "allowed"),
    [
        (
            "link_mbps: 100\nrules: [{rule_id: a, match_kind: port, lane: vip}]",
            "rules[0].match_kind",
            "five_tuple, dscp, cgroup, dst_prefix, default",
        ),
        (
            "link_mbps: 100\nrules: [{rule_id: a, match_kind: default, lane: fast}]",
            "rules[0].lane",
            "vip, standard, bulk",
        ),
        (
            "link_mbps: 100\nlanes: {vip: {min_mbps: 1, prio: 0, burst: 3}}\n"
            "rules: [{rule_id: a, match_kind: default, lane: vip}]",
            "lanes.vip.burst",
            "ceil_mbps, min_mbps, prio",
        ),
        (
            "link_mbps: 100\nrules: [{rule_id: a, match_kind: dscp, dscp: [64], lane: vip}, "
            "{rule_id: d, match_kind: default, lane: vip}]",
            "rules[0].dscp[0]",
            None,
        ),
        (
            "link_mbps: 100\nrules: [{rule_id: a, match_kind: five_tuple, proto: sctp, dst: 198.18.0.1, dport: 1,"
            " lane: vip}]",
            "rules[0].proto",
            "tcp, udp",
        ),
        (
            "link_mbps: 100\nrules: [{rule_id: a, match_kind: dscp, dscp: [1], lane: vip}]",
            "(top level)",
            None,
        ),
    ],
)
def test_invalid_policy_names_file_field_and_allowed(
    tmp_path: Path, text: str, field: str, allowed: str | None
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert caught.value.exit_code == 2
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{path}: field '{field}'")
    if allowed:
        assert f"(allowed: {allowed})" in str(caught.value)


def test_cli_apply_with_invalid_policy_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "link_mbps: 100\nrules: [{rule_id: a, match_kind: default, lane: fast}]")
    assert main(["lanes", "apply", "--dev", "lo", "--policy", path]) == 2
    assert "rules[0].lane" in capsys.readouterr().err


def test_cli_apply_without_root_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["lanes", "apply", "--dev", "lo", "--policy", str(DEFAULT_POLICY_PATH)]) == 3
    assert "root" in capsys.readouterr().err


def test_cli_imports_without_bcc() -> None:
    code = (
        "import sys; from aiops.cli.main import build_parser; build_parser(); assert 'bcc' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_pure_classifier_follows_datapath_order() -> None:
    policy = parse_policy(
        {
            "link_mbps": 100,
            "rules": [
                {
                    "rule_id": "t",
                    "match_kind": "five_tuple",
                    "proto": "tcp",
                    "dst": "198.18.0.9",
                    "dport": 9,
                    "lane": "bulk",
                },
                {"rule_id": "d", "match_kind": "dscp", "dscp": [46], "lane": "vip"},
                {"rule_id": "c", "match_kind": "cgroup", "cgroups": ["/jobs", "/jobs/ckpt"], "lane": "vip"},
                {"rule_id": "c2", "match_kind": "cgroup", "cgroups": ["/jobs/ckpt/writer"], "lane": "bulk"},
                {"rule_id": "wide", "match_kind": "dst_prefix", "prefixes": ["198.18.0.0/16"], "lane": "vip"},
                {
                    "rule_id": "narrow",
                    "match_kind": "dst_prefix",
                    "prefixes": ["198.18.5.0/24"],
                    "lane": "bulk",
                },
                {"rule_id": "default", "match_kind": "default", "lane": "standard"},
            ],
        }
    )

    def flow(**kw: object) -> Flow:
        base: dict[str, object] = {
            "proto": "tcp",
            "src": "198.18.0.1",
            "dst": "198.18.0.9",
            "sport": 1,
            "dport": 9,
        }
        base.update(kw)
        return Flow(**base)  # type: ignore[arg-type]

    assert classify(policy, flow(dscp=46)) == ("t", "bulk")  # 5-tuple before DSCP
    assert classify(policy, flow(dport=10, dscp=46)) == ("d", "vip")
    assert classify(policy, flow(dport=10, cgroup_path="/jobs/ckpt/writer/1")) == ("c2", "bulk")  # deepest
    assert classify(policy, flow(dport=10, cgroup_path="/jobs/x")) == ("c", "vip")
    assert classify(policy, flow(dport=10, dst="198.18.5.7")) == ("narrow", "bulk")  # longest prefix
    assert classify(policy, flow(dport=10, dst="198.18.6.7")) == ("wide", "vip")
    assert classify(policy, flow(dport=10, dst="10.0.0.1")) == ("default", "standard")
