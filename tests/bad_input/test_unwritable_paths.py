"""Issue 38, item 5: every place a command writes that cannot be written ends in one line on stderr naming the
path and what was being written, exit 2, no traceback: `aiops demo --db`, `simulate`, `run`, `fleet`,
`report --out` (it blamed --db), `console serve`, `console adduser`, `mcp`, `profile --out`, the service's
scheduled reports ([report] out_dir), `chat` (its journal and checkpoints), `actions message --out`, `lanes
collect --db/--flows-json`, and a command writing a workspace through DuckDB (`maintenance add`).

Two ways a place is unwritable, as people meet them: a read-only mount (root writes through chmod 0555, not
through a read-only mount: a bind mount remounted read-only in a private mount namespace, `unshare -m`, so
nothing outside the test sees it) and a path under a regular file (`--db notes.txt/ws.duckdb`). The commands
are the real CLI's `main()`, run in one interpreter inside the namespace (tests/unwritable_cli.py): both ways
in one process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiops.store import Workspace
from tests.service_helpers import TINY_SCENARIO, service_env

ROOT = Path(__file__).resolve().parents[2]


def commands(place: Path, tmp_path: Path, *, existing: bool) -> list[dict[str, Any]]:
    """(args, env, the path the error must name, words saying what was being written) for each command that
    writes under `place`; `existing`: `place` holds a workspace (commands that need one are included)."""
    scenario, writable = str(tmp_path / "tiny.yaml"), str(tmp_path / "rw.duckdb")
    listen = ["--listen", "127.0.0.1:0"]
    password = ["--password-file", str(tmp_path / "password")]
    ws = str(place / "ws.duckdb")
    reports_config = tmp_path / f"reports-{place.name}.toml"
    reports_config.write_text(f'[report]\nenabled = true\nout_dir = "{place / "reports"}"\n')
    out: list[dict[str, Any]] = [
        {"args": ["demo", "--db", ws, "--replace"], "path": ws, "what": "the demo's workspace"},
        {
            "args": ["simulate", "--scenario", scenario, "--db", str(place / "sim.duckdb")],
            "path": str(place / "sim.duckdb"),
            "what": "the simulated workspace",
        },
        {
            "args": ["run", "--sim", scenario, "--db", ws, "--duration-s", "1", *listen],
            "path": ws,
            "what": "this node agent's workspace",
        },
        {
            "args": ["fleet", "--prometheus", "http://127.0.0.1:9", "--db", ws, "--duration-s", "1", *listen],
            "path": ws,
            "what": "the fleet's workspace",
        },
        {
            "args": ["report", "--db", writable, "--out", str(place / "reports"), "--start", "latest"],
            "path": str(place / "reports"),
            "what": "the report (--out)",
        },
        {
            "args": [
                "profile",
                "--pid",
                str(os.getpid()),
                "--out",
                str(place / "profile"),
                "--duration-s",
                "1",
            ],
            "path": str(place / "profile"),
            "what": "the profile (--out)",
        },
        {
            "args": ["run", "--sim", scenario, "--db", writable, "--duration-s", "1", *listen],
            "env": {"AIOPS_CONFIG": str(reports_config)},
            "path": str(place / "reports"),
            "what": "the scheduled reports ([report] out_dir)",
        },
        {
            "args": ["actions", "message", "P-0000", "--db", writable, "--out", str(place / "approve.msg")],
            "path": str(place / "approve.msg"),
            "what": "the approval message (--out)",
        },
        {
            "args": ["lanes", "collect", "--dev", "lo", "--no-tcp", "--db", str(place / "lanes.duckdb")],
            "path": str(place / "lanes.duckdb"),
            "what": "the lane telemetry (--db)",
        },
        {
            "args": [
                *("lanes", "collect", "--dev", "lo", "--no-tcp", "--db", writable),
                *("--flows-json", str(place / "flows.jsonl")),
            ],
            "path": str(place / "flows.jsonl"),
            "what": "the per-flow TCP aggregates (--flows-json)",
        },
    ]
    if existing:
        out += [
            {
                "args": ["console", "serve", "--db", ws, *listen],
                "path": ws,
                "what": "the console's workspace",
            },
            {
                "args": [*("console", "adduser", "bob", "--role", "viewer", "--db", ws), *password],
                "path": ws + ".console-users.json",
                "what": "the console's accounts",
            },
            {
                "args": ["mcp", "--db", ws, "--transport", "http", *listen],
                "path": ws,
                "what": "the propose tool files proposals",
            },
            {"args": ["chat", "--db", ws], "path": ws, "what": "the chat's journal"},
            {
                "args": [
                    *("maintenance", "add", "--db", ws),
                    *("--node", "node0", "--for", "1h", "--reason", "x"),
                ],
                "path": ws,
                "what": "the workspace's database",
            },
        ]
    return out


def check(results: list[dict[str, Any]], wanted: list[dict[str, Any]], why: str) -> None:
    assert len(results) == len(wanted)
    for done, case in zip(results, wanted, strict=True):
        said = str(done["stderr"])
        where = f"{why}: aiops {' '.join(case['args'])}:\n{said[-1500:]}"
        assert done["rc"] == 2 and "Traceback" not in said, where
        assert said.count("\n") == 1 and said.startswith("error: "), where  # one line
        assert case["path"] in said and "cannot write here" in said and case["what"] in said, where
        assert why in said, where


def can_mount() -> bool:
    """Root and unshare(1): a read-only bind mount in a private mount namespace can be made."""
    if os.geteuid() == 0 and shutil.which("unshare") is not None:
        return True
    if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
        pytest.fail("a read-only mount in a private mount namespace needs root and unshare(1)")
    return False


@dataclass
class Case:
    wanted: list[dict[str, Any]]
    results: list[dict[str, Any]] | None = None


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    """Both ways in one process (one interpreter's imports, not two): a path under a regular file, and, with
    root, a read-only bind mount (the process starts in a private mount namespace after mounting it)."""
    tmp_path = tmp_path_factory.mktemp("unwritable")
    (tmp_path / "tiny.yaml").write_text(TINY_SCENARIO)
    (tmp_path / "password").write_text("a long enough password 123\n")
    with Workspace(tmp_path / "rw.duckdb").write():
        pass
    blocker = tmp_path / "notes.txt"
    blocker.write_text("a file, not a folder\n")
    out = {"file": Case(commands(blocker, tmp_path, existing=False))}
    script = ""
    if can_mount():
        source, mounted = tmp_path / "source", tmp_path / "ro"
        source.mkdir()
        mounted.mkdir()
        with Workspace(source / "ws.duckdb").write():
            pass
        out["mount"] = Case(commands(mounted, tmp_path, existing=True))
        script = (
            f"mount --bind {source} {mounted} && mount -o remount,bind,ro {mounted} && "
            f"touch {mounted}/probe 2>/dev/null && exit 9; "  # the mount must refuse root's writes
        )
    results = run_in_one_process(tmp_path, [c for case in out.values() for c in case.wanted], script)
    for case in out.values():
        case.results, results = results[: len(case.wanted)], results[len(case.wanted) :]
    return out


def run_in_one_process(
    tmp_path: Path, wanted: list[dict[str, Any]], mounts: str = ""
) -> list[dict[str, Any]]:
    """The commands run by tests/unwritable_cli.py in a process of their own (`aiops run` sets up logging for
    the process: never this one's); with `mounts` (shell commands), in a private mount namespace after them."""
    plan = tmp_path / "commands.json"
    plan.write_text(json.dumps([{"args": c["args"], "env": c.get("env", {})} for c in wanted]))
    command = [sys.executable, "-m", "tests.unwritable_cli", str(plan)]
    if mounts:
        unshare = ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
        command = [*unshare, f"{mounts} exec {' '.join(command)}"]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=service_env(tmp_path),
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    return results


def test_a_path_under_a_file_is_one_line_naming_the_file(cases: dict[str, Case]) -> None:
    case = cases["file"]
    blocker = Path(case.wanted[0]["path"]).parent
    assert case.results is not None
    check(case.results, case.wanted, f"{blocker} is a file, not a folder")
    assert blocker.read_text() == "a file, not a folder\n"  # nothing written over it


def test_a_read_only_mount_is_one_line_naming_the_path(cases: dict[str, Case]) -> None:
    if "mount" not in cases:
        pytest.skip("a read-only mount in a private mount namespace needs root and unshare(1)")
    case = cases["mount"]
    assert case.results is not None
    check(case.results, case.wanted, "Read-only file system")
    source = Path(case.wanted[0]["path"]).parent.parent / "source"
    assert sorted(p.name for p in source.iterdir()) == ["ws.duckdb"]  # nothing was written beside it
