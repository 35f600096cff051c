"""Issue 36, medium 5: `aiops console adduser` run as docs/CONSOLE.md shows it (no `--config`) on a node whose
config sets `[guardrails] witness` wrote its audit row's head to another witness (`<db>.witness`); `aiops audit
verify` then reported tampering for good and response policies stopped (on cc01cd6). Now the store records its
witness at its first audit append and every command whose config names another is refused before it writes:
real CLI processes, a node config with its own witness, a home without one."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from aiops.store import Workspace
from tests.service_helpers import aiops_cmd


def _aiops(home: Path, *args: str, config: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIOPS_")}
    env["HOME"] = str(home)
    if config is not None:
        env["AIOPS_CONFIG"] = str(config)
    return subprocess.run(aiops_cmd(*args), capture_output=True, text=True, env=env, timeout=120)


def test_a_command_under_another_witness_is_refused_and_verify_stays_clean(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    node_config = tmp_path / "node.toml"
    witness = tmp_path / "audit" / "node.witness"
    witness.parent.mkdir()
    node_config.write_text(f'[guardrails]\nwitness = "{witness}"\n')
    db = str(tmp_path / "node.duckdb")
    with Workspace(db).write():
        pass  # the node's workspace (what `aiops run` makes)
    password = tmp_path / "pw"
    password.write_text("correct horse battery staple\n")
    made = _aiops(
        home,
        "console",
        "adduser",
        "alice",
        "--role",
        "admin",
        "--db",
        db,
        "--password-file",
        str(password),
        config=node_config,
    )
    assert made.returncode == 0, made.stderr
    assert witness.exists()
    # as docs/CONSOLE.md shows it: no --config, a home without one (the default witness, <db>.witness)
    refused = _aiops(
        home, "console", "adduser", "victor", "--role", "viewer", "--db", db, "--password-file", str(password)
    )
    assert refused.returncode != 0, refused.stdout
    assert "witness" in refused.stderr and str(witness) in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert not Path(db + ".witness").exists()  # nothing was written to another witness
    # the node's own view is intact: the chain and its witness agree
    verified = _aiops(home, "audit", "verify", "--db", db, "--witness", config=node_config)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # and the verify of a command with another witness says so, instead of reporting tampering
    elsewhere = _aiops(home, "audit", "verify", "--db", db)
    assert elsewhere.returncode != 0 and "this store's audit witness is" in elsewhere.stderr, elsewhere.stderr
