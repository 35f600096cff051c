"""Shared fixtures (an isolated in-memory store per test, a clean environment) and the suite's scheduling.

`make test` runs the suite on every core (pytest-xdist, `--dist loadgroup`; the worker count and why: the Makefile).
Three rules keep that fast and correct: a module whose tests share a module-scoped fixture is one group, run on one worker, so
the fixture is built once; the slowest work units start first (longest-processing-time first), so no worker is
left with a long test while the others idle at the end; and pytest-xdist keeps that order (its default reorders
the units by how many tests each holds, which sends every single slow test after all the groups).

SLOW_FIRST is measured, not guessed: `AIOPS_TEST_TIMES=times.jsonl make test` writes every test's wall and CPU
seconds (its worker's and its reaped children's: the agents, Prometheus, ...) and `python -m tests.times_report
times.jsonl` prints the modules by their slowest work unit (a group's whole run, else the module's slowest test),
largest first, with their CPU seconds; a module missing from it starts after them: the groups by size, then as
collected."""

from __future__ import annotations

import gc
import json
import os
import resource
import shutil
import sys
import time
from collections.abc import Generator, Iterator

import pytest

# Bytecode caches, even where the environment says PYTHONDONTWRITEBYTECODE (this project's machines do): without
# them every process the suite starts compiles the project's modules from source again (each xdist worker, and each
# `aiops run`, `aiops fleet` and CLI call it starts: hundreds), and every worker compiles and assertion-rewrites every
# test module again (`aiops --help`: 1.9 s of CPU without a cache, 0.7 s with; collecting the suite: 12.9 s, 6.0 s).
# The first process to import a module writes its cache beside the source (`__pycache__/`, which git ignores); the
# others read it. Set here, before the workers start and before any test module is imported.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

from aiops.store import Store  # noqa: E402  (after the bytecode switch: its modules are cached too)
from tests.shared_templates import make_run_folder  # noqa: E402

_TEMPLATES = pytest.StashKey[str]()

# Longest first (the wall seconds of its slowest unit in the fresh-clone runs of 2026-12-05, 2 cores), but the three
# longest, which mostly wait on their live stacks (CPU seconds, measured alone: pages 59, fleet live 62, blind 28),
# apart, with CPU-bound units between them: all three side by side would leave a core idle on `make test`'s 2. A
# worker is handed two units at the start (pytest-xdist 3.8), so the first takes the pages test and, after it, the
# fleet's (the fourth); the blind test comes once the other two workers have gone through the CPU-bound ones.
SLOW_FIRST: tuple[str, ...] = (
    "tests/test_pages_live.py",  # 152 s
    "tests/llm_agent/test_chat_oncall.py",  # a twin run, its backfill and the fleet over it: 38 s set-up, 6 tests
    "tests/twin/test_twin_leaks.py",
    "tests/test_fleet_live.py",  # 100 s
    "tests/test_bench_oncall.py",
    "tests/console/test_console_signin_flood.py",
    "tests/twin/test_twin_healthy_fp.py",
    "tests/config/test_config_file_policy.py",
    "tests/test_console_steps_browser.py",
    "tests/slurm/test_slurm_e2e.py",
    "tests/test_concurrency.py",  # counts rounds and answers in 20 s: not beside the start's mypy and collection
    "tests/test_fleet_blind.py",  # 95 s, 60 of them with Prometheus stopped
    "tests/test_loop_service.py",  # 40 s
    # the rest by their unit in the fresh-clone run of 2026-12-05 13:30 (tests.times_report), the groups of 10 s
    # and more that were missing added; the cases made shorter since by their share of it
    "tests/test_dispatch_node.py",  # a group: 43 s
    "tests/profile/test_profile_ebpf.py",  # a group: 40 s
    "tests/prometheus_source/test_promsource_scrape.py",
    "tests/kubernetes/test_k8s_alerts.py",
    "tests/alerts_in/test_alertmanager_in_e2e.py",
    "tests/test_dispatch_live.py",
    "tests/fleet/test_fleet_scopes.py",
    "tests/console/test_console_auth.py",
    "tests/profile/test_rank_timing_ebpf.py",
    "tests/console/test_console_browser.py",  # 29 s, one browser since: ~26 s
    "tests/fleet/test_fleet_dispatch_labels.py",
    "tests/reports/test_report_browser.py",
    "tests/test_plans_live.py",
    "tests/llm_agent/test_mcp.py",
    "tests/console/test_console_service.py",
    "tests/console/test_console_oidc.py",
    "tests/test_service.py",
    "tests/ebpf/test_netlab.py",
    "tests/test_dispatch_steps.py",
    "tests/profile/test_profile_duty_ebpf.py",
    "tests/diagnosis/test_rca_onset.py",
    "tests/notify/test_notify_delivery.py",
    "tests/console/test_console_oidc_browser.py",  # 16 s, one browser since: ~14 s
    "tests/test_dispatch_fleet.py",
    "tests/test_loop_tiers.py",
    "tests/kubernetes/test_k8s_dashboards.py",
    "tests/fleet/test_fleet_demo.py",
    "tests/twin/test_twin_whatif.py",
    "tests/test_service_host.py",
    "tests/test_packaging.py",
    "tests/notify/test_notify_pd_teams_delivery.py",
    "tests/alerts_in/test_alert_flood.py",
    "tests/fleet/test_fleet_shards_view.py",
    "tests/test_service_host_name.py",
    "tests/ebpf/test_rank_straggler.py",  # 16 s; the service stops once the incident is filed since: ~10 s
    "tests/test_service_notify.py",
    "tests/test_one_workspace.py",
    "tests/prometheus_source/test_promsource_analyze.py",  # 16 s; runs cut 90 s after the fault since: ~9 s
    "tests/test_workloads_live.py",
    "tests/test_service_node_agents.py",
    "tests/llm_agent/test_agent_adversarial.py",
    "tests/reports/test_report_schedule.py",
    "tests/prometheus_source/test_sources_prometheus.py",
    "tests/slurm/test_slurm_real.py",
    "tests/llm_agent/test_agent_approvals.py",
    "tests/llm_agent/test_chat_edges.py",
    "tests/test_pipeline_cli.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Under `--dist loadgroup` the controller hands out work units in collection order, which
    `pytest_collection_modifyitems` makes longest first; pytest-xdist's default would reorder them by test count.
    The session's first process makes the run's template folder (tests/shared_templates.py) before the workers
    start: they inherit it."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if not hasattr(config, "workerinput"):
        config.stash[_TEMPLATES] = make_run_folder()


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_TEMPLATES, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The xdist group of a test that uses a fixture built once for several tests: its module's, for a module
    fixture; the fixture's own, for a session or package fixture of this suite (tests/ebpf's `lab_nic`: a veth
    pair and the compiled classifier, ~3.4 s of CPU to build), so that every test using it, whatever its module,
    runs on the one worker that builds it (spread over `make test`'s five workers, it was built five times).
    pytest's and the plugins' own session fixtures (tmp_path_factory, worker_id) are not this suite's: no group."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    module = None
    for name, defs in info.name2fixturedefs.items():
        for d in defs:
            if d.scope in ("session", "package") and getattr(d.func, "__module__", "").startswith("tests."):
                return f"fixture-{name}"
            if d.scope == "module":
                module = item.nodeid.split("::", 1)[0]
    return module


# the cyclic collector's generation thresholds in a test worker after collection (Python's default: 700, 10, 10)
WORKER_GC_THRESHOLDS = (50_000, 20, 100)


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, None, None]:
    """No cyclic garbage collection while a worker imports the product and the ~300 test modules (about half a
    second of CPU in each worker, most of it scanning what stays alive anyway), then everything collection made
    frozen: the collector's full passes during the tests (and pytest's five at the session's end) no longer
    walk those ~350,000 long-lived objects again and again. What the tests allocate is collected as before, with
    a young generation of 50,000 objects instead of 700 (WORKER_GC_THRESHOLDS), for the millions of short-lived
    tuples and small arrays the twin's and the store's tests allocate: ~7 % less CPU on the mean of three
    alternated pairs of three sim-heavy modules, a wider set within this VM's noise, ~7 MB more peak RSS
    (docs/notes/weak_tests.md, "Session of 2026-12-06 10:49 UTC")."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.freeze()
        gc.set_threshold(*WORKER_GC_THRESHOLDS)


# Modules whose tests attach uprobes to the CUDA libraries (libcudart, libnccl) while processes mapping them run
# (a uprobe fires for every process on the host that maps the file): most likely one module's busy target heats (the
# rank collector detaches) another's probes, or one module's short-lived processes make another's collector
# recompile and fail to attach (not proven: test_rank_timing_ebpf stored nothing in 90 s once, beside
# test_profile_ebpf). They run one after another in one worker (one xdist group), never side by side.
CUDA_UPROBE_MODULES = frozenset(
    {
        "tests/profile/test_profile_ebpf.py",
        "tests/profile/test_profile_duty_ebpf.py",
        "tests/profile/test_rank_timing_ebpf.py",
        "tests/profile/test_rank_probe_handover.py",
        "tests/profile/test_service_profile.py",
        "tests/ebpf/test_rank_straggler.py",
    }
)
CUDA_UPROBE_GROUP = "cuda-uprobes"


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: n for n, path in enumerate(SLOW_FIRST)}
    sizes: dict[str, int] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if module in CUDA_UPROBE_MODULES:  # their module fixtures too: one worker runs the whole group
            item.add_marker(pytest.mark.xdist_group(CUDA_UPROBE_GROUP))
            sizes[module] = sizes.get(module, 0) + 1
        elif (group := _shared_fixture_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            sizes[module] = sizes.get(module, 0) + 1

    def order(item: pytest.Item) -> tuple[int, int]:
        module = item.nodeid.split("::", 1)[0]
        if module in rank:
            return (0, rank[module])
        return (1, -sizes[module]) if module in sizes else (2, 0)  # then the groups, larger first

    items.sort(key=order)  # stable: else as collected


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


def _cpu_s() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    """With AIOPS_TEST_TIMES=path, one JSON line per test appended there: its worker, start (epoch s), wall and CPU
    seconds (setup, call and teardown; a module fixture's teardown counts to the module's last test)."""
    path = os.environ.get("AIOPS_TEST_TIMES")
    if not path:
        yield
        return
    start_ts_s, start_wall_s, (own_s, children_s) = time.time(), time.monotonic(), _cpu_s()
    yield
    end_own_s, end_children_s = _cpu_s()
    line = {
        "nodeid": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
        "start_ts_s": round(start_ts_s, 3),
        "wall_s": round(time.monotonic() - start_wall_s, 3),
        "cpu_s": round(end_own_s - own_s, 3),
        "children_cpu_s": round(end_children_s - children_s, 3),
    }
    with open(path, "a", encoding="utf-8") as out:  # one write per line: workers append side by side
        out.write(json.dumps(line) + "\n")


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
