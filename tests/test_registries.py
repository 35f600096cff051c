"""The registries that make adding a host collector, a service collector, an executor backend (a scheduler) or a
notification sink one module plus one registration (docs/ARCHITECTURE.md "Recipes"): each registered piece is
wired to the config the operator writes."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from aiops.config import CollectorsConfig, SchedulerConfig, WebhookConfig
from aiops.integrations.event import IncidentEvent
from aiops.integrations.payloads import SINK_FORMATS, SinkKind, render
from aiops.runtime.schedulers import SCHEDULER_BACKENDS, scheduler_routes
from aiops.service.sources import SERVICE_COLLECTORS
from aiops.store import Store
from collectors.host import HOST_COLLECTORS, NVML_KIND, HostContext, collector_section, host_collectors
from collectors.topology import discover_topology
from guardrails.routing import SCHEDULER_KINDS
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


def test_every_scheduler_the_config_allows_has_one_backend_that_routes_its_kinds(tmp_path: Path) -> None:
    """`[scheduler] kind` words, `SCHEDULER_BACKENDS` and guardrails' `SCHEDULER_KINDS` (the tables that connect
    to nothing) agree, and each backend builds a route for exactly its kinds, under its own name."""
    allowed = set(get_args(SchedulerConfig.model_fields["kind"].annotation)) - {"none"}
    assert allowed == set(SCHEDULER_BACKENDS) == set(SCHEDULER_KINDS) - {"none"}
    for name, backend in SCHEDULER_BACKENDS.items():
        assert set(backend.action_kinds) == set(SCHEDULER_KINDS[name]), name
        with Store(":memory:", scheduler=SchedulerConfig(kind=name, node_name="gpu-a100-017")) as store:
            routes = scheduler_routes(store, "gpu-a100-017", object())  # an API client handed in: none made
        assert set(routes) == set(backend.action_kinds), name
        assert {route.backend for route in routes.values()} == {name}, name


def test_every_service_collector_has_its_config_section_and_a_name_of_its_own() -> None:
    """The collectors the service builds from its whole config (`SERVICE_COLLECTORS`) are switched by a
    `[collectors]` section with `enabled`, and none shares a section with a host collector."""
    sections = CollectorsConfig.model_fields
    host = {kind.section for kind in (NVML_KIND, *HOST_COLLECTORS)}
    for kind in SERVICE_COLLECTORS:
        assert kind.section in sections and kind.section not in host, kind.section
        assert "enabled" in type(getattr(CollectorsConfig(), kind.section)).model_fields, kind.section
