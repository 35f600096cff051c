"""A non-editable install works away from the checkout: the wheel carries the playbooks, the BPF sources, the
default policies and the public eval suite as package data, and from a fresh virtual environment `aiops demo`
files its proposals and `aiops eval` scores the packaged public suite.

The wheel is built from a copy of the source tree with this environment's setuptools (its PEP 517 `build_wheel`,
which `pip wheel --no-build-isolation` calls; no download) and installed with --no-deps into a fresh venv that
borrows the test environment's dependencies (pip included) through a path file (so the test needs no network); the
checkout is never on the new interpreter's path, which the test checks. `pip install .` with its dependencies from PyPI is the same wheel (see the closing notes).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from aiops.labels import DIAGNOSIS_LABELS

ROOT = Path(__file__).resolve().parents[1]
IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "out",
    "build",
    "*.egg-info",
    "__pycache__",
    "*.duckdb*",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
)


def _run(argv: list[str], cwd: Path, timeout_s: float = 600) -> str:
    """Run a command in its own process group: on a timeout the whole group ends (`aiops eval --workers N`
    forks workers that would outlive a killed parent)."""
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, f"{' '.join(argv)}\n{out[-3000:]}\n{err[-3000:]}"
    return out


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the project's wheel installed; returns its bin directory."""
    work = tmp_path_factory.mktemp("packaging")
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=IGNORED)
    # the PEP 517 hook pip's `wheel --no-build-isolation` calls, called once: pip would first start itself (about
    # 0.5 CPU-s) and ask the backend for the metadata in a build of its own (egg_info) before the wheel's
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    _run([sys.executable, "-c", build, str(work / "dist")], source)
    wheel = next((work / "dist").glob("aiops_gpu-*.whl"))
    venv = work / "venv"
    # without its own pip (ensurepip: 2.5 s of CPU): the path file below lends it the test environment's, which
    # installs into the venv it runs in
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], work)
    python = venv / "bin" / "python"
    purelib = _run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work
    ).strip()
    deps = [p for p in (sysconfig.get_paths()["purelib"], *site.getsitepackages()) if Path(p).is_dir()]
    (Path(purelib) / "test-deps.pth").write_text("\n".join(deps) + "\n")  # dependencies, not this project
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], work)
    return venv / "bin"


@pytest.fixture(scope="module")
def found(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Where the installed package finds its modules and data, asked once of the new interpreter (one start and
    import for both tests): the modules' and data files' paths, the playbooks and scenarios it loads, and the
    packaged public suite's folder."""
    where = _run(
        [
            str(installed / "python"),
            "-c",
            (
                "import json, aiops, bpf, evals, playbooks\n"
                "from aiops.console.app import STATIC\n"
                "from aiops.console.web import environment\n"
                "from aiops.datapath.loader import source_file\n"
                "from aiops.datapath.policy import DEFAULT_POLICY_PATH\n"
                "from aiops.playbooks import load_playbooks\n"
                "from evals.harness import PUBLIC_SUITE, suite_files\n"
                "from guardrails.responses import DEFAULT_RESPONSES_PATH\n"
                "print(json.dumps({'files': [aiops.__file__, bpf.__file__, evals.__file__, playbooks.__file__,"
                " str(source_file('lanes.bpf.c')), str(DEFAULT_POLICY_PATH), str(DEFAULT_RESPONSES_PATH),"
                " str(STATIC / 'chat.js'), str(STATIC / 'console.css'), environment().get_template('incident.html').filename],"
                " 'playbooks': len(load_playbooks()), 'scenarios': len(suite_files(PUBLIC_SUITE)),"
                " 'suite': str(PUBLIC_SUITE)}))"
            ),
        ],
        tmp_path_factory.mktemp("probe"),
    )
    return dict(json.loads(where))


def test_the_wheel_carries_its_data_and_runs_from_site_packages(
    installed: Path, found: dict[str, Any]
) -> None:
    venv = str(installed.parent)
    assert all(f.startswith(venv) for f in found["files"]), found["files"]  # not the checkout
    assert all(Path(f).is_file() for f in found["files"])
    # one playbook per label but healthy
    assert found["playbooks"] == len(DIAGNOSIS_LABELS) and found["scenarios"] >= 48


# Three cases of the packaged suite (a single cause, two causes, a healthy run), read from the installed package:
# the whole public suite is `make eval`'s job, not the unit suite's.
PACKAGED_CASES = ("thermal-node-small.yaml", "two-powercap-node-then-pcie-small.yaml", "healthy-default.yaml")


def test_demo_and_packaged_scenarios_from_the_installed_wheel(
    installed: Path, found: dict[str, Any], tmp_path: Path
) -> None:
    db = tmp_path / "demo.duckdb"
    result = json.loads(_run([str(installed / "aiops"), "demo", "--db", str(db), "--json"], tmp_path))
    assert result["hypotheses"][0]["root_cause"] == "thermal_throttle"
    listed = json.loads(
        _run([str(installed / "aiops"), "actions", "list", "--db", str(db), "--json"], tmp_path)
    )
    assert any(p["physical"] and p["status"] == "pending" for p in listed)
    packaged = Path(found["suite"])
    assert str(packaged).startswith(str(installed.parent)), packaged  # the wheel's copy, not the checkout's
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in PACKAGED_CASES:
        shutil.copy(packaged / name, suite / name)
    report = json.loads(
        _run([str(installed / "aiops"), "eval", "--suite", str(suite), "--json", "--workers", "2"], tmp_path)
    )
    summary = report["summary"]
    assert summary["cases"] == len(PACKAGED_CASES), summary
    assert summary["top1"] == 1.0 and summary["false_positives"] == 0 and summary["unsafe_actions"] == 0, (
        summary
    )
    assert summary["expected_causes"] == 3 and summary["cause_recall_at_3"] == 1.0, summary
