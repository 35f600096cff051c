"""`aiops dcim` and `aiops policy` end to end on a simulated run and its twin: nothing automatic before two
people approve the exact file, automatic caps after, proposals again when one byte changes; bad files exit 2
naming the file, the field and the allowed values; `watch` polls a file and stops cleanly."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from aiops.cli import dcim as dcim_cli
from aiops.cli.main import main
from aiops.sim.twin import Twin
from aiops.store import Store, Workspace
from guardrails import unsafe_executions
from guardrails.audit import read_rows
from guardrails.records import GuardrailRecords
from guardrails.responses import DEFAULT_RESPONSES_PATH
from tests.signing_helpers import make_keys, shared_keys

SCENARIO = {
    "name": "dcim-cli",
    "seed": 4,
    "duration_s": 60,
    "cluster": {"racks": 2, "nodes_per_rack": 1, "gpus_per_node": 4, "nics_per_node": 1},
    "jobs": [{"name": "llm", "nodes": ["node0", "node1"]}],
}


@pytest.fixture
def run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Path]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(SCENARIO))
    db = tmp_path / "run.duckdb"
    assert main(["simulate", "--scenario", str(scenario), "--db", str(db)]) == 0
    policy = tmp_path / "responses.yaml"
    shutil.copyfile(DEFAULT_RESPONSES_PATH, policy)
    capsys.readouterr()
    return {"db": db, "scenario": scenario, "policy": policy, "dir": tmp_path}


pytestmark = pytest.mark.usefixtures("shared_signing")  # approvals are signed with these keys


def _key(person: str) -> str:
    return str(shared_keys().keys[person])


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Exit code, stdout, stderr; rich wraps long lines, so whitespace is folded to single spaces
    (stdout stays as printed when it is JSON)."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out if "--json" in args else " ".join(out.split()), " ".join(err.split())


def twin_limits_w(db: Path) -> np.ndarray:
    """The power limits of the workspace's twin, rebuilt from the database (no file beside it)."""
    with Workspace(db).read() as store:
        twin = Twin.load(store)
    assert twin is not None
    return np.asarray(twin.world.power_limit_w, dtype=float)


def test_nothing_automatic_until_two_people_approve_the_exact_file(
    run: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db, policy = str(run["db"]), str(run["policy"])
    cap = ["dcim", "cap", "--rack", "rack0", "--kw", "3.5", "--db", db, "--policy", policy, "--json"]
    code, out, _ = cli(capsys, *cap)
    first = json.loads(out)
    assert code == 0 and not first["policy"]["approved"]
    assert first["actions"] and {a["status"] for a in first["actions"]} == {"pending"}
    assert set(twin_limits_w(run["db"])) == {700.0}  # the twin was saved untouched

    assert cli(capsys, "policy", "approve", policy, "--key", _key("alice"), "--db", db)[0] == 0
    stranger = str(make_keys(run["dir"] / "stranger", ("eve",)).keys["eve"])  # "llm" has no allowed key
    code, _, err = cli(capsys, "policy", "approve", policy, "--key", stranger, "--db", db)
    assert code == 1 and "signature: the signing key is not" in err
    assert cli(capsys, "policy", "status", policy, "--db", db)[0] == 1  # one of two people
    assert cli(capsys, "policy", "approve", policy, "--key", _key("bob"), "--db", db)[0] == 0
    code, out, _ = cli(capsys, "policy", "status", policy, "--db", db)
    assert code == 0 and "approved by alice, bob" in out

    code, out, _ = cli(capsys, *cap)
    second = json.loads(out)
    executed = [a for a in second["actions"] if a["status"] == "executed"]
    assert code == 0 and second["policy"]["approved"] and [a["target"] for a in executed] == ["node0"]
    limits = twin_limits_w(run["db"])
    assert set(limits[:4]) == {550.0} and set(limits[4:]) == {700.0}  # rack0 one 150 W step down
    with Store(db, read_only=True) as store:
        assert unsafe_executions(read_rows(store)) == 0
        statuses = {r.action.proposal_id: r.status for r in GuardrailRecords(store).proposals()}
    assert {statuses[a["proposal_id"]] for a in first["actions"] if a["kind"] == "set_power_limit"} == {
        "denied"
    }
    assert cli(capsys, "audit", "verify", "--db", db)[0] == 0

    run["policy"].write_bytes(run["policy"].read_bytes().replace(b"max_step_w: 150", b"max_step_w: 140", 1))
    code, out, _ = cli(capsys, "policy", "status", policy, "--db", db)
    assert code == 1 and "not approved" in out and "file changed?" in out
    code, out, _ = cli(capsys, *[a for a in cap if a != "--json"])
    assert code == 0 and "not approved" in out and "executed" not in out
    assert set(twin_limits_w(run["db"])[:4]) == {550.0}


def test_bad_files_and_arguments_exit_2_naming_file_field_and_allowed_values(
    run: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(run["db"])
    bad = run["dir"] / "bad.yaml"
    bad.write_text(
        "version: 1\nrules:\n  - {rule_id: move, on: dcim_cap, respond: migrate_jobs, mode: automatic}\n"
    )
    for args in (
        ["dcim", "cap", "--rack", "rack0", "--kw", "3", "--db", db, "--policy", str(bad)],
        ["policy", "show", str(bad), "--db", db],
        ["policy", "approve", str(bad), "--key", _key("alice"), "--db", db],
    ):
        code, _, err = cli(capsys, *args)
        assert code == 2 and f"{bad}: field 'rules[0].mode'" in err and "allowed: propose" in err
    code, _, err = cli(capsys, "dcim", "cap", "--rack", "rack9", "--kw", "3", "--db", db)
    assert code == 2 and "'rack9' is not a DCIM scope" in err and "allowed: fleet, rack0, rack1" in err
    code, _, err = cli(capsys, "dcim", "cap", "--fleet", "--kw", "-1", "--db", db)
    assert code == 2 and "field 'kw'" in err
    signals = run["dir"] / "signals.json"
    signals.write_text(json.dumps({"rack0": {"kilowatts": 3}}))
    code, _, err = cli(capsys, "dcim", "watch", "--file", str(signals), "--once", "--db", db)
    assert code == 2 and f"{signals}: field 'rack0.kilowatts': unknown key (allowed: kw, clear)" in err
    signals.write_text("{not json")
    assert cli(capsys, "dcim", "watch", "--file", str(signals), "--once", "--db", db)[0] == 2
    code, _, err = cli(
        capsys, "dcim", "watch", "--file", str(run["dir"] / "missing.json"), "--once", "--db", db
    )
    assert code == 2 and "no such file" in err
    with Store(db, read_only=True) as store:  # nothing was recorded by the refused commands
        assert store.scalar("SELECT count(*) FROM dcim_signals") == 0


def test_watch_polls_the_file_clears_what_it_drops_and_stops_on_ctrl_c(
    run: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(run["db"])
    signals = run["dir"] / "signals.yaml"
    signals.write_text("rack0: {kw: 3.5}\nfleet: {kw: 100}\n")
    watch = ["dcim", "watch", "--file", str(signals), "--db", db, "--actuator", "none", "--interval-s", "0"]
    code, out, _ = cli(capsys, *watch, "--max-rounds", "2")
    assert (
        code == 0
        and "round 1: rack0: cap 3.5 kW; fleet: cap 100 kW" in out
        and "round 2: no new signal" in out
    )
    signals.write_text("fleet: {kw: 100}\n")
    assert cli(capsys, *watch, "--once")[0] == 0
    code, out, _ = cli(capsys, "dcim", "status", "--db", db, "--json")
    in_force = {s["scope"]: s["kind"] for s in json.loads(out)["signals"]}
    assert in_force == {"fleet": "cap", "rack0": "clear"}

    # A real Ctrl-C (SIGINT to this process) right after the first round: the watch ends its wait and stops
    # between rounds, exit 0, and puts the previous handler back.
    real_watch = dcim_cli.watch

    def watch_then_ctrl_c(*args: Any, on_round: Any, **kwargs: Any) -> int:
        def round_then_interrupt(n: int, result: Any) -> None:
            on_round(n, result)
            os.kill(os.getpid(), signal.SIGINT)

        return real_watch(*args, on_round=round_then_interrupt, **kwargs)

    monkeypatch.setattr(dcim_cli, "watch", watch_then_ctrl_c)
    # The handler this process started with: Python's default in a terminal, SIG_IGN when a shell started it in
    # the background. The watch installs its own for its run and must put back whichever it found.
    found = signal.getsignal(signal.SIGINT)
    code, out, _ = cli(capsys, *watch[:-1], "30")  # a long interval: the Ctrl-C ends the wait
    assert code == 0 and "stopped after 1 round" in out
    assert signal.getsignal(signal.SIGINT) is found


def test_the_nvml_actuator_sets_this_hosts_gpus_and_refuses_without_a_driver(
    run: dict[str, Path], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--actuator nvml --node node0` drives the pynvml module: here the simulator's NVML of a fresh world
    stands in for the driver; with the real nvidia-ml-py and no driver (this machine) it exits 3."""
    import types

    import pynvml as real_pynvml

    from aiops.scenarios import parse_scenario
    from aiops.sim.world import World

    db, policy = str(run["db"]), str(run["policy"])
    for person in ("alice", "bob"):
        assert cli(capsys, "policy", "approve", policy, "--key", _key(person), "--db", db)[0] == 0
    cap = [
        "dcim",
        "cap",
        "--rack",
        "rack0",
        "--kw",
        "3.5",
        "--db",
        db,
        "--policy",
        policy,
        "--json",
        "--actuator",
        "nvml",
        "--node",
        "node0",
    ]
    if not _driver_present(real_pynvml):
        code, _, err = cli(capsys, *cap)
        assert code == 3 and "NVML is not usable on this host" in err
    world = World(parse_scenario(SCENARIO))
    host = world.nvml(0)
    fake = types.ModuleType("pynvml")
    for name in dir(host):
        if name.startswith("nvml"):
            setattr(fake, name, getattr(host, name))
    fake.NVMLError = real_pynvml.NVMLError  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    code, out, _ = cli(capsys, *cap)
    executed = [a for a in json.loads(out)["actions"] if a["status"] == "executed"]
    assert code == 0 and [a["target"] for a in executed] == ["node0"]
    assert set(world.power_limit_w[:4]) == {550.0} and set(world.power_limit_w[4:]) == {700.0}
    code, _, err = cli(capsys, *cap[:-1], "node7")
    assert code == 1 and "--actuator nvml needs --node" in err


def _driver_present(pynvml: Any) -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True
