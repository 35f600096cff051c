"""Real SSH keys for tests: `ssh-keygen` makes an ed25519 key per person in a tmp folder, an allowed-signers file
(namespaces="aiops-approval") names them, and a config file points `[guardrails] allowed_signers` and
`[guardrails.approvers]` at them. `Keys.signer(name)` signs as that person; `Keys.verifier()` checks.

Without ssh-keygen the tests skip, and fail under AIOPS_REQUIRE_EBPF=1 (tests/service_helpers.require_binary).
"""

from __future__ import annotations

import atexit
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from aiops.config import GuardrailsConfig, load_config
from aiops.store import Store
from guardrails.signing import NAMESPACE, SshSigner, SshVerifier
from tests.service_helpers import require_binary

EVERYTHING = ("physical", "policy")


@dataclass
class Keys:
    folder: Path
    keys: dict[str, Path] = field(default_factory=dict)  # principal -> private key file
    lines: list[str] = field(default_factory=list)
    approvers: dict[str, list[str]] = field(default_factory=dict)

    @property
    def allowed(self) -> Path:
        return self.folder / "allowed_signers"

    @property
    def config(self) -> Path:
        return self.folder / "aiops.toml"

    def make_key(self, file_name: str) -> Path:
        key = self.folder / file_name
        if not key.exists():
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", file_name, "-f", str(key)],
                check=True,
                capture_output=True,
            )
        return key

    def add(self, name: str, classes: Sequence[str] = EVERYTHING, *, key: Path | None = None) -> Path:
        """Name `name` in the allowed-signers file with its own new key (or `key`, another person's)."""
        key = key if key is not None else self.make_key(f"id_{name}")
        public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
        self.lines.append(f'{name} namespaces="{NAMESPACE}" {public}')
        self.keys.setdefault(name, key)
        self.approvers[name] = list(classes)
        self.write()
        return key

    def write(self) -> None:
        self.allowed.write_text("\n".join(self.lines) + "\n")
        table = "\n".join(f'"{n}" = [{", ".join(repr(c) for c in cs)}]' for n, cs in self.approvers.items())
        self.config.write_text(
            f'[guardrails]\nallowed_signers = "{self.allowed}"\n\n[guardrails.approvers]\n{table}\n'
        )

    @property
    def guardrails(self) -> GuardrailsConfig:
        """The `[guardrails]` of `config`, as a command passes it down to the workspace it opens."""
        return GuardrailsConfig(allowed_signers=str(self.allowed), approvers=self.approvers)  # type: ignore[arg-type]

    def signer(self, name: str) -> SshSigner:
        return SshSigner(self.keys[name])

    def verifier(self) -> SshVerifier:
        return SshVerifier(self.allowed, self.approvers)


def ssh_sign(key: Path, message: bytes, namespace: str = NAMESPACE) -> str:
    """What a person runs elsewhere: `ssh-keygen -Y sign -n aiops-approval -f KEY` over exactly `message`."""
    done = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-q", "-n", namespace, "-f", str(key)],
        input=message,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.decode("ascii")


def make_keys(folder: Path, names: Sequence[str] = ("alice", "bob", "carol")) -> Keys:
    require_binary("ssh-keygen")
    folder.mkdir(parents=True, exist_ok=True)
    keys = Keys(folder)
    for name in names:
        keys.add(name)
    return keys


@pytest.fixture
def signing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Keys:
    """alice, bob and carol, each with a key allowed to approve physical actions and policies; $AIOPS_CONFIG
    names them, so the CLI uses them; code below the CLI is given `keys.guardrails` (the store's policy)."""
    keys = make_keys(tmp_path / "keys")
    monkeypatch.setenv("AIOPS_CONFIG", str(keys.config))
    return keys


def configured_store(path: str | Path, *, read_only: bool = False) -> Store:
    """`Store(path)` under the `[guardrails]` of the config $AIOPS_CONFIG names (the `signing` fixtures set it),
    as a command opens its workspace under the config it loaded."""
    return Store(path, read_only=read_only, guardrails=load_config().guardrails)


_SHARED: list[Keys] = []


def shared_keys() -> Keys:
    """One set of keys for the whole test process (alice, bob, carol, dave), made on first use: for helpers
    that approve without a test's own `signing` fixture (tests/dcim_helpers.approve)."""
    if not _SHARED:
        folder = Path(tempfile.mkdtemp(prefix="aiops-test-keys-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # the process's keys go with it
        _SHARED.append(make_keys(folder, ("alice", "bob", "carol", "dave")))
    return _SHARED[0]


@pytest.fixture
def shared_signing(monkeypatch: pytest.MonkeyPatch) -> Keys:
    """`shared_keys()`, named by $AIOPS_CONFIG for this test (the CLI's DCIM rounds)."""
    keys = shared_keys()
    monkeypatch.setenv("AIOPS_CONFIG", str(keys.config))
    return keys
