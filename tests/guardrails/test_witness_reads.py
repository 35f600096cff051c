"""Issue 23, M7: `aiops audit verify` read the witness without a bound (a symlink to /dev/zero: 11.6 GB in 15 s)
and would block for ever on a FIFO. Only a regular file is read, and at most `MAX_WITNESS_BYTES`: a FIFO, a
device (or a symlink to one) and an oversized file are refused at once with one line and exit 2."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from aiops.errors import InputError
from aiops.store import Store
from guardrails import witness
from guardrails.audit import AuditLog
from tests.clirun import run_cli
from tests.service_helpers import service_env


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "w.duckdb"
    with Store(path) as store:
        AuditLog(store).append("report", {"note": "one row"}, actor="test")
    return path


def _verify(tmp_path: Path, db: Path, witness_path: Path) -> tuple[int, str, float]:
    """`aiops audit verify` in this process (tests/clirun.py: no 2 s of start-up per case); the tests' timeout
    mark bounds it (the old code read /dev/zero until memory ran out, and a FIFO for ever)."""
    started = time.monotonic()
    done = run_cli(
        "audit", "verify", "--db", str(db), "--witness", str(witness_path), env=service_env(tmp_path)
    )
    return done.returncode, done.stderr + done.stdout, time.monotonic() - started


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["dev-zero-symlink", "fifo", "fifo-symlink"])
def test_a_witness_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, db: Path, kind: str) -> None:
    path = tmp_path / "audit.witness"
    if kind == "dev-zero-symlink":
        path.symlink_to("/dev/zero")
    else:
        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        if kind == "fifo":
            path = fifo
        else:
            path.symlink_to(fifo)
    rc, out, took_s = _verify(tmp_path, db, path)
    assert rc == 2, out
    assert "not a regular file" in out and str(path.name) in out and "Traceback" not in out, out
    assert len(out.strip().splitlines()) <= 2, out  # one line (the terminal may wrap it once)
    assert took_s < 30, took_s


@pytest.mark.timeout(60)
def test_an_oversized_witness_is_refused_without_reading_it_all(tmp_path: Path, db: Path) -> None:
    path = tmp_path / "audit.witness"
    with path.open("wb") as f:
        f.truncate(witness.MAX_WITNESS_BYTES + 1)  # sparse: no disk used
    rc, out, _ = _verify(tmp_path, db, path)
    assert rc == 2 and "larger than" in out and "Traceback" not in out, out
    small = tmp_path / "small.witness"
    small.write_bytes(b"1 " + b"0" * 64 + b"\n" * 100)
    with pytest.raises(InputError, match="larger than 10 bytes"):
        witness.read(small, limit_bytes=10)  # the bound is the one read() is given
