"""The Helm chart (deploy/helm/aiops) rendered by Helm's own Go SDK (helm-python-sdk binds libhelm_c, Helm v4's
engine: the same templates, functions and value merging as `helm template`), and the schemas its objects are
checked against: Kubernetes' through kubernetes-validate, the prometheus-operator's CRDs through the models
cloudcoil generates from the operator's published CRD schemas (made strict here: an unknown field is refused,
as the API server's structural-schema pruning would silently drop it)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus_process import prometheus_running
from tests.service_helpers import require_binary

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "aiops"
GRAFANA = ROOT / "deploy" / "grafana"
RELEASE, NAMESPACE = "aiops", "aiops"
NODE_NAMESPACE = "aiops-node"  # the node agents' own (privileged) namespace: <release namespace>-node


def helm() -> Any:
    """helm_python, or a skip where it is not installed (a failure in CI: AIOPS_REQUIRE_EBPF=1)."""
    try:
        import helm_python  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - installed by scripts/setup.sh (pip install -e '.[dev]')
        if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
            pytest.fail("helm-python-sdk is not installed (pip install -e '.[dev]')")
        pytest.skip("helm-python-sdk is not installed")
    return helm_python


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every object the chart renders with `values` over values.yaml (checked against values.schema.json, as
    `helm template` does). No value is required: hosts name themselves (node.hosts is optional)."""
    with helm().Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    objects = []
    for template, text in sorted(manifests.items()):
        if not template.endswith("NOTES.txt"):
            objects += [d for d in yaml.safe_load_all(text) if d]
    return objects


def render_notes(values: dict[str, Any] | None = None) -> str:
    """The NOTES.txt Helm prints after an install with `values`."""
    with helm().Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE)
    return next(text for template, text in manifests.items() if template.endswith("NOTES.txt"))


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and name in (None, o["metadata"]["name"])]
    assert len(found) == 1, f"{len(found)} {kind} objects named {name!r}"
    return found[0]


def rule_groups(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The PrometheusRule's groups as a Prometheus rule file (what the operator hands Prometheus)."""
    return {"groups": one(objects, "PrometheusRule")["spec"]["groups"]}


# -- the prometheus-operator's CRD schemas -------------------------------------------------------------------
def _strict(schema: Any) -> Any:
    """The schema with `additionalProperties: false` on every object that lists its properties."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def crd_schema(kind: str) -> dict[str, Any]:
    try:
        from cloudcoil.models.prometheus_operator import v1
    except ImportError:  # pragma: no cover
        if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
            pytest.fail("cloudcoil-models-prometheus-operator is not installed (pip install -e '.[dev]')")
        pytest.skip("cloudcoil-models-prometheus-operator is not installed")
    model = getattr(v1, kind)
    return dict(_strict(model.model_json_schema(by_alias=True, mode="validation")))


def crd_errors(obj: dict[str, Any]) -> list[str]:
    """Where `obj` (a monitoring.coreos.com/v1 object) breaks its CRD's schema; [] when it fits."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(crd_schema(obj["kind"]))
    return [
        f"{obj['kind']}/{obj['metadata']['name']} at {'/'.join(map(str, e.absolute_path)) or '.'}: {e.message[:300]}"
        for e in validator.iter_errors(obj)
    ]


CRD_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
K8S_VERSIONS = ("1.31", "1.35")


def kubernetes_validate(path: Path, version: str) -> subprocess.CompletedProcess[str]:
    """The kubernetes-validate CLI installed beside this Python (the venv's), else the one on PATH."""
    cli = Path(sys.executable).parent / "kubernetes-validate"
    argv = [str(cli)] if cli.exists() else [require_binary("kubernetes-validate")]
    return subprocess.run(
        [*argv, "--strict", "-k", version, str(path)], capture_output=True, text=True, timeout=120
    )


def assert_valid_strict(objects: list[dict[str, Any]], version: str, tmp_path: Path) -> None:
    """Every rendered object but the operator's CRDs passes `kubernetes-validate --strict` for `version`."""
    plain = [o for o in objects if o["kind"] not in CRD_KINDS]
    manifest = tmp_path / "chart.yaml"
    manifest.write_text(yaml.safe_dump_all(plain))
    done = kubernetes_validate(manifest, version)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert output.count(" passed for resource ") == len(plain), output
    assert "WARN" not in output and "ERROR" not in output, output


# What these helpers run: one node agent, no fleet. The chart renders its rules for that (a node's incident pages
# at once: no fleet will cover it; with a fleet it waits `nodeIncidentFor` for the fleet, tests/test_pages_live.py).
NO_FLEET: dict[str, Any] = {"fleet": {"enabled": False}}


def prometheus_config(
    tmp_path: Path,
    target_port: int,
    job: str,
    values: dict[str, Any] | None = None,
    targets_file: Path | None = None,
) -> Path:
    """The chart's rules loaded, `target_port` scraped every second as `job`; with `targets_file`, the targets are
    that watched file's instead (written once the target listens: Prometheus may start before it)."""
    targets: dict[str, Any] = (
        {"static_configs": [{"targets": [f"127.0.0.1:{target_port}"]}]}
        if targets_file is None
        else {"file_sd_configs": [{"files": [str(targets_file)]}]}
    )
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(rule_groups(render(NO_FLEET if values is None else values))))
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules)],
                "scrape_configs": [{"job_name": job, "honor_labels": True, **targets}],
            }
        )
    )
    return config


@contextmanager
def prometheus_scraping(folder: Path, target_port: int, job: str, binary: str = "") -> Iterator[int]:
    """A real Prometheus (`binary`, else the one on PATH) on a free loopback port scraping `target_port` every
    second as `job`, the chart's rules loaded (`prometheus_config`); yields its port once ready, stopped by PID."""
    with prometheus_running(prometheus_config(folder, target_port, job), folder, binary=binary) as port:
        yield port
