"""Shared fixtures (an isolated in-memory store per test, a clean environment) and the suite's scheduling.

`make test` runs the suite on every core (`pytest -n <cores + 1> --dist loadgroup`, pytest-xdist). Two rules keep
that fast and correct: a module whose tests share a module-scoped fixture is one group, run on one worker, so
the fixture is built once; and the slowest modules start first (longest-processing-time first), so no worker is
left with a long test while the other idles at the end. SLOW_FIRST is measured, not guessed: the
`--durations` of a whole run, largest first; a module missing from it only starts later."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiops.store import Store

SLOW_FIRST: tuple[str, ...] = (
    "tests/test_slurm_e2e.py",
    "tests/test_fleet_live.py",
    "tests/test_dispatch_live.py",
    "tests/security/test_alert_flood.py",
    "tests/security/test_report_browser.py",
    "tests/security/test_promsource_analyze.py",
    "tests/test_slurm_real.py",
    "tests/security/test_rank_timing_ebpf.py",
    "tests/test_k8s_alerts.py",
    "tests/test_k8s_dashboards.py",
    "tests/test_workloads_live.py",
    "tests/test_service_host_name.py",
    "tests/test_packaging.py",
    "tests/test_agent_adversarial.py",
    "tests/security/test_twin_healthy_fp.py",
    "tests/test_service.py",
    "tests/test_notify_pd_teams_delivery.py",
    "tests/test_concurrency.py",
    "tests/security/test_twin_leaks.py",
    "tests/security/test_console_browser.py",
    "tests/security/test_console_oidc_browser.py",
    "tests/security/test_console_oidc.py",
    "tests/security/test_console_auth.py",
    "tests/test_pipeline_cli.py",
    "tests/security/test_rca_onset.py",
    "tests/security/test_promsource_scrape.py",
    "tests/test_agent_approvals.py",
    "tests/test_sources_prometheus.py",
    "tests/security/test_alertmanager_in_e2e.py",
    "tests/test_service_node_agents.py",
    "tests/test_dispatch_node.py",
    "tests/security/test_report_schedule.py",
    "tests/test_mcp.py",
    "tests/test_chat_edges.py",
)


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(d.scope == "module" for defs in info.name2fixturedefs.values() for d in defs)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(SLOW_FIRST)}
    items.sort(
        key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank))
    )  # stable: else as collected
    for item in items:
        if _shares_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::", 1)[0]))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup`, pytest-xdist must have put each group into its tests' node ids (`name@group`):
    if a version pair stops doing so, every module fixture is silently built once per worker. Say so instead."""
    if not getattr(session.config.option, "loadgroup", False):  # set on xdist workers only
        return
    lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
    if lost:
        raise pytest.UsageError(
            f"pytest-xdist did not group {len(lost)} tests (first: {lost[0]}): check versions"
        )


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """An in-memory store; in a test that uses real keys (`signing`, `shared_signing`), opened under their
    `[guardrails]`, as a command passes its config down to the workspace it opens."""
    keys = next(
        (request.getfixturevalue(n) for n in ("signing", "shared_signing") if n in request.fixturenames), None
    )
    s = Store(":memory:", guardrails=None if keys is None else keys.guardrails)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(autouse=True)
def _clean_llm_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach an outside LLM endpoint by inheriting the developer's environment."""
    for name in ("AIOPS_LLM_BASE_URL", "AIOPS_LLM_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


from tests.signing_helpers import shared_signing, signing  # noqa: E402,F401  (fixtures: real SSH keys)
