"""Issue 23, the input lows: a FIFO given to `investigate` blocked for ever (now: regular files only, exit 2,
one line; the YAML/JSON loader too); a journal line of 30,000 nested arrays and a timestamp of "17²" gave
tracebacks (now: read as text, and no time); a damaged workspace (its accounts file a link to nothing, or
garbage) offered a first-run set-up URL (now: one line on stderr, no URL, no token file)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from aiops.console.app import ConsoleOptions, create_app
from aiops.console.server import announce_setup
from aiops.console.setup import setup_path
from aiops.errors import InputError
from aiops.safeload import read_limited
from aiops.store import Workspace
from tests.service_helpers import aiops_cmd

XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus."


def test_a_fifo_given_to_investigate_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "kern.log"
    os.mkfifo(fifo)
    done = subprocess.run(
        aiops_cmd("investigate", str(fifo), "--json"), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr[-500:]
    assert done.stderr.strip().count("\n") == 0 and "FIFO" in done.stderr and str(fifo) in done.stderr


def test_a_fifo_given_as_a_yaml_or_json_file_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "scenario.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_limited(fifo, InputError)


def test_hostile_journal_records_are_read_without_a_traceback(tmp_path: Path) -> None:
    log = tmp_path / "journal.json"
    good = {"MESSAGE": XID79, "_HOSTNAME": "node1", "__REALTIME_TIMESTAMP": "1700000000000000"}
    odd_time = {**good, "__REALTIME_TIMESTAMP": "17²"}
    deep = '{"MESSAGE": ' + "[" * 30_000 + "]" * 30_000 + "}"
    log.write_text("\n".join([json.dumps(good), json.dumps(odd_time), deep]) + "\n")
    done = subprocess.run(
        aiops_cmd("investigate", str(log), "--json"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-800:]
    assert json.loads(done.stdout)["hypotheses"][0]["root_cause"] == "gpu_fell_off_bus"


@pytest.mark.parametrize("damage", ["dangling link", "garbage"])
def test_a_damaged_accounts_file_offers_no_set_up_url(
    tmp_path: Path, damage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "ws.duckdb"
    accounts = Path(str(db) + ".console-users.json")
    if damage == "dangling link":
        os.symlink(tmp_path / "gone.json", accounts)
    else:
        accounts.write_bytes(b"\x00{not json")
    app = create_app(Workspace(db), ConsoleOptions())
    assert announce_setup(app, "127.0.0.1", 9) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(accounts) in err and "/setup/" not in err, err
    assert not setup_path(str(db)).exists()
