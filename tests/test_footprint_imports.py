"""What a node agent loads (docs/BENCHMARKS.md, "Overhead"): `aiops run`, run for real for a few seconds, never
imports pyarrow, numpy, the twin, bcc or the LLM, console and report stacks on a host (they cost tens of MB of
RSS), and with `--sim` only numpy of those (the twin's physics). `aiops COMMAND` imports that command's module
alone, and the table that says which module that is matches what the modules register."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from aiops.cli.main import COMMAND_MODULES, COMMANDS
from tests.service_helpers import TINY_SCENARIO

HEAVY = (
    "pyarrow",
    "numpy",
    "aiops.sim",
    "bcc",
    "langgraph",
    "langchain_core",
    "openai",
    "matplotlib",
    "aiops.agent.graph",
    "aiops.console.app",
    "aiops.report.build",
    "aiops.evidence",
    "websockets",
    "rich",
    # uvicorn's command line and reloaders (aiops/service/bare_package.py) and the flame graph's writer
    "click",
    "multiprocessing",
    "uvicorn.main",
    "xml",
    "aiops.profile.outputs",
)
# what a node agent loads only at a feature's first use or where its config asks for it (docs/BENCHMARKS.md,
# "Round nine"): the analyst, plans and playbooks (an incident), the profiler (a diagnosis asking for one), rank
# timing's probes (a host's collector), Slack ([chatops.slack]), the notification sinks (a webhook) and the
# ticket sink ([notify.ticket])
AT_FIRST_USE = (
    "aiops.rca",
    "aiops.pipeline",
    "aiops.plans",
    "aiops.playbooks",
    "aiops.memory",
    "aiops.profile.session",
    "aiops.profile.probes",
    "aiops.profile.rank_collector",
    "aiops.service.slack_actions",
    "aiops.runtime.actions",
    "aiops.integrations",
    "aiops.sources",  # the Prometheus source's: the first /metrics/dcgm or /metrics/facility scrape, or alert
    "aiops.detect.effects",  # an executed action's verdict
    "aiops.runtime.schedulers",  # the schedulers' actuators and view: a [scheduler] configured
    "guardrails.actuators_slurm",
    "guardrails.actuators_k8s",
    "guardrails.scheduler_view",
    "guardrails.actuators_sysfs",  # the cooling devices: the NVML actuator's
    "guardrails.dispatched",  # a fleet's dispatch to this node
    "guardrails.dispatch_request",
)
RANK_TIMING = ("aiops.profile.probes", "aiops.profile.rank_collector")  # a host's collector, on by default
TWIN_ONLY = ("aiops.scenarios", "aiops.datapath.policy")  # the scenario's and the lanes policy's models
RUN = """
import json, sys
from aiops.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def _run(tmp_path: Path, *extra: str) -> set[str]:
    config = tmp_path / "aiops.toml"
    config.write_text(f'[store]\npath = "{tmp_path / "agent.duckdb"}"\n[http]\nlisten = "127.0.0.1:0"\n')
    done = subprocess.run(
        [sys.executable, "-c", RUN, "run", "--config", str(config), "--duration-s", "4", *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["code"] == 0
    return set(answer["modules"])


def _loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name in modules or any(m.startswith(name + ".") for m in modules)]


def test_a_node_agent_on_a_host_loads_none_of_the_heavy_stacks(tmp_path: Path) -> None:
    modules = _run(tmp_path)
    assert "aiops.service.service" in modules and "duckdb" in modules
    assert _loaded(modules, HEAVY) == []
    assert _loaded(modules, tuple(n for n in AT_FIRST_USE + TWIN_ONLY if n not in RANK_TIMING)) == []


def test_a_node_agent_of_the_twin_loads_numpy_for_its_world_and_nothing_else_heavy(tmp_path: Path) -> None:
    scenario = tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    modules = _run(tmp_path, "--sim", str(scenario), "--speed", "4")
    assert "aiops.sim.world" in modules and "numpy" in modules
    assert _loaded(modules, tuple(n for n in HEAVY if n not in ("numpy", "aiops.sim"))) == []
    assert (
        _loaded(modules, AT_FIRST_USE) == []
    )  # a healthy node's first seconds: no incident, nothing configured


def test_the_node_agents_import_path_loads_no_feature_before_its_first_use() -> None:
    """`aiops run`'s modules, imported in a fresh process, leave out what a healthy node never runs (each costs
    its code and classes in the agent's resident set for as long as it runs)."""
    code = (
        "import json, sys\n"
        "import aiops.cli.run, aiops.service.service, aiops.service.sources\n"
        "from aiops.models import Incident\n"
        "from guardrails.actions import Action\n"
        "from guardrails.approvals import Approval\n"
        "from guardrails.responses import ResponsePolicy\n"
        "from guardrails.runbook import Runbook\n"
        "from aiops.service.alerts_in import WebhookPayload\n"
        "deferred = (Incident, Action, Approval, ResponsePolicy, Runbook, WebhookPayload)\n"
        "built = [m.__name__ for m in deferred if m.__pydantic_complete__]\n"
        "print(json.dumps({'modules': sorted(sys.modules), 'built': built}))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout)
    modules = set(answer["modules"])
    assert "aiops.service.service" in modules
    assert _loaded(modules, AT_FIRST_USE + TWIN_ONLY) == []
    # the models a healthy node never validates keep no validator until their first use (defer_build)
    assert answer["built"] == []


def test_each_command_is_registered_by_the_module_the_table_names() -> None:
    registered: dict[str, str] = {}
    for module in COMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        registered.update(dict.fromkeys(sub.choices, module))
    assert registered == COMMANDS


def test_the_approval_commands_load_no_analyst() -> None:
    """`aiops actions`, `aiops policy` and `aiops dcim` (which people and tests run many times: each start is
    their imports) load neither the analyst nor the Prometheus source: ~0.3 CPU-s of a start each."""
    code = "import importlib, json, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\nprint(json.dumps(sorted(sys.modules)))"
    commands = ("aiops.cli.actions", "aiops.cli.policy", "aiops.cli.dcim")
    done = subprocess.run(
        [sys.executable, "-c", code, *commands], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(json.loads(done.stdout))
    assert (
        _loaded(modules, ("aiops.pipeline", "aiops.cli.analyze_prometheus", "aiops.sources", "aiops.rca"))
        == []
    )


def test_a_command_imports_without_the_collector_then_turns_it_back_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`aiops` (its own command line) builds its parser, importing the command's modules, with the cyclic
    collector off, then on again with what the import made frozen out of its passes; a collector the caller had
    off stays off, and a caller's in-process `main([...])` freezes none of the caller's objects."""
    import gc

    from aiops.cli.main import main

    monkeypatch.setattr(sys, "argv", ["aiops", "config", "--help"])
    gc.unfreeze()
    try:
        with pytest.raises(SystemExit):
            main()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        gc.unfreeze()
        with pytest.raises(SystemExit):
            main(["config", "--help"])
        assert gc.isenabled() and gc.get_freeze_count() == 0
        gc.disable()
        try:
            with pytest.raises(SystemExit):
                main()
            assert not gc.isenabled() and gc.get_freeze_count() == 0
        finally:
            gc.enable()
    finally:
        gc.freeze()  # as tests/conftest.py leaves a worker after its collection


BARE = """
import sys
from aiops.service.bare_package import bare_package
bare_package("uvicorn", {"Config": "uvicorn.config", "Server": "uvicorn.server"})
from uvicorn.server import Server
from uvicorn import Config  # what its lifespan modules ask of it
lean = "click" not in sys.modules and "uvicorn.main" not in sys.modules
import uvicorn
whole = uvicorn.run is not None and uvicorn.Server is Server and "uvicorn.main" in sys.modules
try:
    uvicorn.no_such_name
    missing = False
except AttributeError:
    missing = True
print(lean, whole, missing)
"""


def test_a_bare_package_loads_only_the_submodules_asked_for_and_stays_whole_for_others() -> None:
    done = subprocess.run(
        [sys.executable, "-c", BARE], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True", "True"]
