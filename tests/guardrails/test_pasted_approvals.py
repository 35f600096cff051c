"""Approvals signed elsewhere (guardrails/pasted.py): the message shown, signed by ssh-keygen, recorded with its
window; a window the kind does not allow, a signature over other bytes, or a message file changed after it was
written are refused with a clear error and nothing recorded."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from aiops.cli.actions import signed_window
from aiops.errors import GuardrailError, InputError
from aiops.store import Store
from guardrails.actions import Action
from guardrails.audit import read_rows
from guardrails.pasted import PastedSignature, approval_to_sign
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.signing import NAMESPACE
from guardrails.topology import Topology
from tests.signing_helpers import Keys, signing

__all__ = ["signing"]


def ssh_sign(key: Path, message: bytes) -> str:
    done = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(key)],
        input=message,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("ascii")


@pytest.fixture
def desk(signing: Keys, tmp_path: Path) -> Guardrails:
    store = Store(tmp_path / "ws.duckdb", guardrails=signing.guardrails)
    topology = Topology.grid(1, 2, 4, 1)
    guard = Guardrails(store, context_for=lambda now: Context(topology, {}, (), now))
    action = Action(
        proposal_id="P-1",
        kind="gpu_reset",
        target="node0/gpu1",
        proposed_by="analyst",
        created_ts_s=time.time() - 10,
    )
    assert guard.propose(action).status == "pending"
    return guard


def test_a_signature_made_elsewhere_over_the_shown_message_approves(desk: Guardrails, signing: Keys) -> None:
    shown = approval_to_sign(desk, "P-1")
    signature = ssh_sign(signing.keys["alice"], shown.message)
    auth = desk.approve("P-1", PastedSignature(signature), signed_at=(shown.ts_s, shown.expires_ts_s))
    assert auth.signed_by == "alice" and auth.approvers == ("alice",)  # gpu_reset: a second person to go
    assert "printf '%s'" in shown.command() and shown.message.decode() in shown.command()


def test_a_window_longer_than_the_kind_allows_or_other_bytes_are_refused(
    desk: Guardrails, signing: Keys
) -> None:
    shown = approval_to_sign(desk, "P-1")
    long_expiry = shown.ts_s + 30 * 86_400.0
    with pytest.raises(GuardrailError, match="window"):
        desk.approve("P-1", PastedSignature("x"), signed_at=(shown.ts_s, long_expiry))
    with pytest.raises(GuardrailError, match="window"):
        desk.approve("P-1", PastedSignature("x"), signed_at=(time.time() + 60, time.time() + 120))
    other = ssh_sign(signing.keys["alice"], shown.message + b"\n")  # a newline added: other bytes
    with pytest.raises(GuardrailError, match="signature"):
        desk.approve("P-1", PastedSignature(other), signed_at=(shown.ts_s, shown.expires_ts_s))
    with pytest.raises(GuardrailError, match="not an SSH signature"):
        desk.approve("P-1", PastedSignature("hello"), signed_at=(shown.ts_s, shown.expires_ts_s))
    assert read_rows(desk.store, proposal_id="P-1", event="approval") == []


def test_the_message_file_must_be_the_exact_bytes(desk: Guardrails, tmp_path: Path) -> None:
    shown = approval_to_sign(desk, "P-1")
    path = tmp_path / "m.json"
    path.write_bytes(shown.message)
    assert signed_window(path, "P-1") == (shown.ts_s, shown.expires_ts_s)
    path.write_bytes(shown.message + b"\n")
    with pytest.raises(InputError, match="newline"):
        signed_window(path, "P-1")
    path.write_bytes(shown.message)
    with pytest.raises(InputError, match="another proposal"):
        signed_window(path, "P-2")
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match="--message"):
        signed_window(path, "P-1")
