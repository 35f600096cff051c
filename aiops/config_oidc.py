"""`[console.oidc]`: single sign-on for the web console through an OpenID Connect provider, beside the local
accounts (docs/CONSOLE.md, "Single sign-on"). Empty `issuer`: off (the default).

The provider's ID token names the person (`principal_claim`, prefixed with `principal_prefix`: the console
principal that signs decisions and that `[guardrails.approvers]` must list to approve) and their groups or roles
(`role_claim`), which `role_map` turns into a console role. A value that maps to no role signs nobody in: there
is no default role.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ConsoleRole = Literal["viewer", "approver", "admin"]  # aiops.console.accounts.ROLES (a test keeps them equal)
_PREFIX = re.compile(r"^(?:[a-z][a-z0-9]*[._-])?$", re.ASCII)
_DOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)+$", re.ASCII)


def loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_url(value: str, what: str) -> str:
    """An https URL (http only to a loopback host: a provider run on the node or in a test), no query or
    fragment, no trailing slash; ValueError saying what is wrong."""
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError(f"{what} must be an https:// URL")
    if parts.scheme == "http" and not loopback_host(parts.hostname):
        raise ValueError(f"{what} must be https:// (http:// only to 127.0.0.1, ::1 or localhost)")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{what} must have no query, fragment or user part")
    return value.rstrip("/")


class OidcConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(
        default="",
        description="the provider's issuer URL (its /.well-known/openid-configuration is read); empty: off",
    )
    name: str = Field(
        default="single sign-on", max_length=40, description='shown as "Sign in with <name>" on /login'
    )
    client_id: str = Field(default="", max_length=200, description="the console's client id at the provider")
    client_secret_file: str = Field(
        default="",
        description="file holding the client secret (sent by HTTP Basic); empty: a public client (PKCE alone)",
    )
    scopes: list[str] = Field(default_factory=lambda: ["openid", "profile", "email"])
    redirect_base_url: str = Field(
        default="",
        description="the console's URL as browsers reach it; the provider sends them back to "
        "<this>/oidc/callback (register that URL at the provider)",
    )
    principal_claim: Literal["sub", "preferred_username"] = Field(
        default="preferred_username",
        description="the ID token claim that names the person (a person's name: letters, digits, . _ -)",
    )
    principal_prefix: str = Field(
        default="oidc-",
        description='put before that name ("oidc-" + "alice" = "oidc-alice", what [guardrails.approvers] '
        'lists); "" shares names with the local accounts',
    )
    role_claim: str = Field(
        default="groups",
        min_length=1,
        max_length=100,
        description="the claim (a string or list) mapped to a role",
    )
    role_map: dict[str, ConsoleRole] = Field(default_factory=dict)
    allowed_domains: list[str] = Field(default_factory=list)
    allowed_subjects: list[str] = Field(default_factory=list)
    timeout_s: float = Field(default=10.0, gt=0, le=60, description="each request to the provider at most")

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return check_url(value, "issuer") if value else value

    @field_validator("redirect_base_url")
    @classmethod
    def _redirect(cls, value: str) -> str:
        return check_url(value, "redirect_base_url") if value else value

    @field_validator("principal_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not _PREFIX.match(value):
            raise ValueError('must be "" or a word of lower-case letters and digits ending in . _ or -')
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        if "openid" not in value:
            raise ValueError('must include "openid"')
        if any(not s or not s.isascii() or not s.isprintable() or " " in s for s in value):
            raise ValueError("each scope is one printable ASCII word")
        return value

    @field_validator("allowed_domains")
    @classmethod
    def _domains(cls, value: list[str]) -> list[str]:
        folded = [d.strip().casefold() for d in value]
        bad = [d for d in folded if not _DOMAIN.match(d)]
        if bad:
            raise ValueError(f"'{bad[0][:60]}' is not a domain name (example.com)")
        return folded

    @model_validator(mode="after")
    def _complete(self) -> OidcConfig:
        if not self.issuer:
            return self
        missing = [k for k in ("client_id", "redirect_base_url") if not getattr(self, k)]
        if missing:
            raise ValueError(f"issuer is set: {' and '.join(missing)} must be set too")
        if not self.role_map:
            raise ValueError("issuer is set: role_map must map at least one claim value to a role")
        return self
