"""Issue 11, item 1: approvals are SSH signatures by people. Each test here passed an attack on the code before
(identity was a typed name): one person with two names, two names on one key, `alice` and `alice.`, reserved
names, an approval of a 30-day-old proposal, a fleet cap split into rack actions approved by one person."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from aiops.config import GuardrailsConfig
from aiops.errors import GuardrailError
from aiops.store import Store
from guardrails import DEFAULT_REGISTRY, Guardrails, RecordingActuator, action_hash
from guardrails.approvals import Approval, ApprovalBook, person_name
from guardrails.signing import SshSigner, SshVerifier, decision_message
from tests.guardrails_helpers import NOW_TS_S, TOPOLOGY, FakeClock, action, seed_store
from tests.service_helpers import require_binary
from tests.signing_helpers import Keys, make_keys


def _desk(
    store: Store, clock: FakeClock, keys: Keys, actuator: RecordingActuator | None = None
) -> Guardrails:
    seed_store(store)
    return Guardrails(store, actuator=actuator or RecordingActuator(), clock=clock, verifier=keys.verifier())


def _gpu_reset(clock: FakeClock, pid: str = "P-1") -> object:
    return action(proposal_id=pid, kind="gpu_reset", target="node3/gpu5", parameters={}, created_ts_s=clock())


def test_one_person_signing_twice_is_one_approver(store: Store, signing: Keys) -> None:
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = _desk(store, clock, signing, actuator)
    desk.propose(_gpu_reset(clock))  # type: ignore[arg-type]
    first = desk.approve("P-1", signing.signer("alice"))
    again = desk.approve("P-1", signing.signer("alice"))
    assert not first.ok and not again.ok and again.approvers == ("alice",)
    assert desk.execute("P-1").rule == "approval" and actuator.applied == []
    assert desk.approve("P-1", signing.signer("bob")).ok
    assert desk.execute("P-1").status == "executed"


def test_two_names_on_one_key_are_not_two_people(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    keys.add("mallory", key=keys.keys["alice"])  # the same key under a second name
    with pytest.raises(GuardrailError, match="the key of alice is listed again under mallory"):
        keys.verifier()
    keys.lines = [keys.lines[0].replace("alice ", "alice,mallory ", 1)]  # one line, two names
    keys.write()
    with pytest.raises(GuardrailError, match="one key, one person"):
        keys.verifier()


def test_two_names_presenting_one_key_fingerprint_count_once() -> None:
    """Two principals that present one key fingerprint count once even when the allowed-signers file is
    bypassed (the approval book counts distinct keys as well as names)."""
    reset = action(kind="gpu_reset", parameters={}, created_ts_s=NOW_TS_S - 60)

    def signed(name: str, key: str) -> Approval:
        return Approval(
            proposal_id="P-1",
            approver=name,
            action_hash=action_hash(reset),
            ts_s=NOW_TS_S - 10,
            expires_ts_s=NOW_TS_S + 600,
            key_fingerprint=key,
        )

    one_key = ApprovalBook(TOPOLOGY, approvals=[signed("alice", "SHA256:k1"), signed("bob", "SHA256:k1")])
    assert not one_key.is_authorised(reset, NOW_TS_S).ok
    two_keys = ApprovalBook(TOPOLOGY, approvals=[signed("alice", "SHA256:k1"), signed("bob", "SHA256:k2")])
    assert two_keys.is_authorised(reset, NOW_TS_S).ok


@pytest.mark.parametrize(
    "name",
    [
        "alice.",
        "alice..x",
        "-alice",
        "alice_",
        "claude",
        "gpt4",
        "executor",
        "admin1",
        "root",
        "llm-helper",
        "openai",
    ],
)
def test_look_alike_and_non_person_principals_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(GuardrailError):
        person_name(name)
    keys = make_keys(tmp_path / "keys", ("alice",))
    keys.add(name)
    with pytest.raises(GuardrailError, match="allowed_signers"):
        keys.verifier()


def test_alice_and_alice_dot_cannot_meet_the_two_person_rule(tmp_path: Path, store: Store) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    keys.lines.append(keys.lines[0].replace("alice ", "alice. ", 1))  # a second principal on her key
    keys.write()
    with pytest.raises(GuardrailError, match=r"'alice\.' is not an approver name"):
        keys.verifier()


def test_a_forged_signature_and_another_decision_do_not_verify(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    verifier = keys.verifier()
    message = decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-1", action_hash="a" * 64)
    signature = keys.signer("alice").sign(message)
    assert verifier.verify(message, signature).principal == "alice"
    other = decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-2", action_hash="a" * 64)
    with pytest.raises(GuardrailError, match="does not verify"):
        verifier.verify(other, signature)
    stranger = make_keys(tmp_path / "other", ("eve",))
    with pytest.raises(GuardrailError, match="signing key is not"):
        verifier.verify(message, stranger.signer("eve").sign(message))
    with pytest.raises(GuardrailError, match="not an SSH signature"):
        verifier.verify(message, "alice approves")


def test_a_principal_without_the_physical_class_cannot_approve(tmp_path: Path, store: Store) -> None:
    keys = make_keys(tmp_path / "keys", ("alice",))
    keys.add("dave", classes=("policy",))
    clock = FakeClock()
    desk = _desk(store, clock, keys)
    desk.propose(action(proposal_id="P-1", created_ts_s=clock()))
    with pytest.raises(GuardrailError, match="dave may not approve physical"):
        desk.approve("P-1", keys.signer("dave"))
    assert desk.approve("P-1", keys.signer("alice")).ok


def test_a_thirty_day_old_proposal_cannot_be_approved_or_executed(store: Store, signing: Keys) -> None:
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = _desk(store, clock, signing, actuator)
    old = clock() - 30 * 86_400.0
    desk.propose(action(proposal_id="P-1", created_ts_s=old))
    # the row says it never expires (a proposal from before expiry existed, or an edited row)
    store.conn.execute(
        "UPDATE proposals SET expires_ts_s = NULL, status = 'pending' WHERE proposal_id = 'P-1'"
    )
    with pytest.raises(GuardrailError, match="expired"):
        desk.approve("P-1", signing.signer("alice"))
    assert desk.execute("P-1").rule == "expired" and actuator.applied == []


def test_a_fleet_cap_split_into_rack_actions_needs_two_people(store: Store, signing: Keys) -> None:
    clock = FakeClock()
    actuator = RecordingActuator()
    desk = _desk(store, clock, signing, actuator)
    fleet = action(proposal_id="P-fleet", target="fleet", created_ts_s=clock())
    assert DEFAULT_REGISTRY.approvals_needed(fleet, TOPOLOGY.expand("fleet")) == 2  # the whole: two people
    for rack in ("rack0", "rack1"):
        desk.propose(action(proposal_id=f"P-{rack}", target=rack, created_ts_s=clock()))
    assert desk.approve("P-rack0", signing.signer("alice")).ok
    with pytest.raises(GuardrailError, match="two_person: alice approved P-rack0"):
        desk.approve("P-rack1", signing.signer("alice"))
    assert desk.approve("P-rack1", signing.signer("bob")).ok  # a second person may
    assert not any(a.approver == "alice" for a in desk.records.approvals("P-rack1"))


def test_the_verifier_names_the_principal_and_key_fingerprint(signing: Keys) -> None:
    verifier = signing.verifier()
    assert isinstance(verifier, SshVerifier)
    message = decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-1", action_hash="a" * 64)
    alice = verifier.verify(message, signing.signer("alice").sign(message))
    bob = verifier.verify(message, signing.signer("bob").sign(message))
    assert (alice.principal, bob.principal) == ("alice", "bob")
    assert alice.fingerprint.startswith("SHA256:") and alice.fingerprint != bob.fingerprint
    assert alice.risk_classes == frozenset({"physical", "policy"})


def test_a_key_held_by_ssh_agent_signs_through_its_public_half(
    tmp_path: Path, signing: Keys, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_binary("ssh-agent")
    socket = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if socket.exists():
                break
            time.sleep(0.05)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket))
        subprocess.run(["ssh-add", "-q", str(signing.keys["alice"])], check=True, capture_output=True)
        public = SshSigner(Path(f"{signing.keys['alice']}.pub"))
        Path(signing.keys["alice"]).unlink()  # only the agent holds the private key now
        message = decision_message(
            "approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-1", action_hash="a" * 64
        )
        assert signing.verifier().verify(message, public.sign(message)).principal == "alice"
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    monkeypatch.delenv("SSH_AUTH_SOCK")
    with pytest.raises(GuardrailError, match="no ssh-agent runs"):
        public.sign(b"x")


def test_chat_without_a_key_names_the_command_that_signs(signing: Keys) -> None:
    from aiops.cli.chat import _signer

    with pytest.raises(GuardrailError, match=r"no signing key.*aiops actions approve P-1 --key FILE"):
        _signer(None, "P-1", GuardrailsConfig())
    assert _signer(str(signing.keys["bob"]), "P-1", signing.guardrails).key == signing.keys["bob"]
