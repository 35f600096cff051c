"""The registries that make adding a host collector or a notification sink one module plus one registration
(docs/ARCHITECTURE.md "Recipes"): each registered piece is wired to the config the operator writes."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from aiops.config import CollectorsConfig, WebhookConfig
from aiops.integrations.event import IncidentEvent
from aiops.integrations.payloads import SINK_FORMATS, SinkKind, render
from collectors.host import HOST_COLLECTORS, NVML_KIND, HostContext, collector_section, host_collectors
from collectors.topology import discover_topology
from tests.notify_helpers import event


def test_every_collector_kind_has_its_config_section_and_unique_names() -> None:
    sections = set(CollectorsConfig.model_fields)
    names = [name for kind in (NVML_KIND, *HOST_COLLECTORS) for name in kind.names]
    assert len(names) == len(set(names)), "two kinds report under one collector name"
    for kind in (NVML_KIND, *HOST_COLLECTORS):
        assert kind.section in sections, f"{kind.names}: no [collectors] section '{kind.section}'"
        for name in kind.names:
            assert collector_section(name) == kind.section


def test_each_kind_builds_collectors_under_its_registered_names(tmp_path: Path) -> None:
    context = HostContext("node0", tmp_path, discover_topology("node0", "rack0", tmp_path), None, ())
    for kind in HOST_COLLECTORS:
        built = kind.build(context)
        assert built and [c.name for c in built] == list(kind.names), kind.names
        for c in built:
            close = getattr(c, "close", None)
            if close is not None:
                close()


def test_host_collectors_runs_the_registry_in_order(tmp_path: Path) -> None:
    host = host_collectors("node0", "rack0", tmp_path, use_nvml=False, use_kmsg=False)
    try:
        expected = [name for kind in HOST_COLLECTORS if kind.section != "kmsg" for name in kind.names]
        assert [c.name for c in host.collectors] == expected
    finally:
        host.close()


def test_every_sink_kind_the_config_allows_is_registered() -> None:
    allowed = set(get_args(WebhookConfig.model_fields["kind"].annotation))
    assert allowed == set(SINK_FORMATS) == set(get_args(SinkKind))


@pytest.mark.parametrize("kind", sorted(SINK_FORMATS))
def test_every_sink_kind_renders_an_incident(kind: SinkKind) -> None:
    opened: IncidentEvent = event("opened")
    body = render(kind, opened, "inc-1/opened")
    assert body and body == SINK_FORMATS[kind].incident(opened, "inc-1/opened", ())
