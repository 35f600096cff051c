"""A real OpenID Connect provider for the single sign-on tests: `oidc-provider-mock` (authlib's authorization
server on Flask, served by uvicorn) run as its own process on a free loopback port, requiring a nonce and PKCE
(tests/oidc_pkce_provider.py: the mock checks no verifier by itself), stopped by its PID. A person is given claims through its `PUT /users/<sub>` API; the subject is typed (or posted) on its
authorize page, as a person would."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest

from aiops.config_oidc import OidcConfig
from tests.service_helpers import free_port, get, wait_for

CLIENT_ID = "aiops-console"
ROLE_MAP = {"aiops-admins": "admin", "aiops-approvers": "approver", "aiops-viewers": "viewer"}


@dataclass(frozen=True)
class RunningProvider:
    port: int
    host: str = "127.0.0.1"

    @property
    def issuer(self) -> str:
        return f"http://{self.host}:{self.port}"

    def set_user(self, sub: str, claims: dict[str, object]) -> None:
        """Give `sub` these claims at the provider (its user API); they land in the ID token."""
        request = urllib.request.Request(
            f"{self.issuer}/users/{quote(sub, safe='')}",
            data=json.dumps(claims).encode(),
            method="PUT",
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 204


def _require_package() -> None:
    if (
        importlib.util.find_spec("oidc_provider_mock") is None
    ):  # looked up, not imported: it runs in its process
        if os.environ.get("AIOPS_REQUIRE_EBPF") == "1":
            pytest.fail("the oidc-provider-mock package is not installed (pip install -e '.[dev]')")
        pytest.skip("the oidc-provider-mock package is not installed")


@contextmanager
def oidc_provider(folder: Path) -> Iterator[RunningProvider]:
    """The provider on 127.0.0.1 (a free port), nonces required; stopped (SIGTERM to its PID) at the end."""
    _require_package()
    port = free_port()
    log = (folder / "oidc-provider.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.oidc_pkce_provider", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=log,
        env={k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))},
        cwd=str(Path(__file__).resolve().parent.parent),  # `-m tests.oidc_pkce_provider` from the repository
    )
    provider = RunningProvider(port)
    try:
        wait_for(
            lambda: (
                proc.poll() is not None
                or get(provider.issuer + "/.well-known/openid-configuration", 2.0)[0] == 200
            ),
            60,
            "the OIDC provider",
            interval_s=0.2,
        )
        assert proc.poll() is None, (folder / "oidc-provider.log").read_text()[-3000:]
        yield provider
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
            log.close()


def oidc_config(
    issuer: str, redirect_base_url: str, secret_file: Path | None = None, **extra: object
) -> OidcConfig:
    return OidcConfig.model_validate(
        {
            "issuer": issuer,
            "name": "Mock IdP",
            "client_id": CLIENT_ID,
            "client_secret_file": str(secret_file or ""),
            "redirect_base_url": redirect_base_url,
            "role_map": ROLE_MAP,
            **extra,
        }
    )


def oidc_toml(issuer: str, redirect_base_url: str, secret_file: Path) -> str:
    """The same as a `[console.oidc]` section of a config file."""
    roles = "\n".join(f'"{k}" = "{v}"' for k, v in ROLE_MAP.items())
    return (
        f'[console.oidc]\nissuer = "{issuer}"\nname = "Mock IdP"\nclient_id = "{CLIENT_ID}"\n'
        f'client_secret_file = "{secret_file}"\nredirect_base_url = "{redirect_base_url}"\n'
        f"[console.oidc.role_map]\n{roles}\n"
    )
