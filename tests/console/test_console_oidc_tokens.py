"""Single sign-on's checks at unit level, with keys made here: an ID token is accepted only when signed by the
provider's key with an announced RS256/ES256, for this client, from this issuer, in date and with this sign-in's
nonce; the discovery document, the JWKS key choice, PKCE's S256 challenge, the claims -> principal and role
mapping, and the `[console.oidc]` section's validation."""

from __future__ import annotations

import time
import typing
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from aiops.config import load_config_file
from aiops.config_oidc import ConsoleRole, OidcConfig
from aiops.console.accounts import ROLES
from aiops.console.app import read_secret
from aiops.console.oidc import choose_key, code_challenge, parse_discovery, verify_claims
from aiops.console.oidc_signin import identity
from aiops.errors import ConfigError, InputError, SignInRefused

ISSUER = "https://idp.example.com"
CLIENT = "aiops-console"
NONCE = "n-0S6_WzA2Mj"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _token(key: Any = RSA_KEY, alg: str = "RS256", **override: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": CLIENT,
        "sub": "248289761001",
        "iat": now,
        "exp": now + 300,
        "nonce": NONCE,
    }
    claims.update(override)
    return jwt.encode({k: v for k, v in claims.items() if v is not None}, key, algorithm=alg)


def _verify(token: str, key: Any = None, alg: str = "RS256") -> dict[str, Any]:
    public = (key or RSA_KEY).public_key()
    return verify_claims(token, public, alg, issuer=ISSUER, audience=CLIENT, nonce=NONCE)


def test_a_token_signed_by_the_providers_key_for_this_client_and_nonce_is_accepted() -> None:
    assert _verify(_token())["sub"] == "248289761001"
    assert _verify(_token(EC_KEY, "ES256"), EC_KEY, "ES256")["sub"] == "248289761001"


@pytest.mark.parametrize(
    ("override", "why"),
    [
        ({"iss": "https://evil.example.com"}, "another issuer"),
        ({"aud": "someone-else"}, "another client"),
        ({"aud": [CLIENT, "someone-else"], "azp": "someone-else"}, "several audiences"),
        ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 3700}, "expired"),
        ({"iat": int(time.time()) + 3600}, "future"),
        ({"iat": int(time.time()) - 3000}, "too long ago"),
        ({"nonce": "another-sign-in"}, "nonce"),
        ({"nonce": None}, "nonce"),
        ({"exp": None}, "no exp claim"),
    ],
)
def test_a_token_for_another_issuer_client_time_or_sign_in_is_refused(
    override: dict[str, Any], why: str
) -> None:
    with pytest.raises(SignInRefused, match=why):
        _verify(_token(**override))


def test_a_token_signed_by_another_key_none_or_an_hmac_of_the_public_key_is_refused() -> None:
    with pytest.raises(SignInRefused, match="signature does not verify"):
        _verify(_token(OTHER_RSA))
    unsigned = jwt.encode({"iss": ISSUER, "aud": CLIENT, "sub": "x", "nonce": NONCE}, None, algorithm="none")
    with pytest.raises(SignInRefused, match="not valid"):
        _verify(unsigned)
    with pytest.raises(SignInRefused, match="not an algorithm the console accepts"):
        verify_claims(unsigned, None, "none", issuer=ISSUER, audience=CLIENT, nonce=NONCE)
    pem = RSA_KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    # the classic confusion: an HMAC keyed with the public key the console holds; PyJWT also refuses PEM as an
    # HMAC key, so the attacker's token is made by hand
    import base64
    import hashlib
    import hmac
    import json

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    now = int(time.time())
    body = {"iss": ISSUER, "aud": CLIENT, "sub": "x", "iat": now, "exp": now + 60, "nonce": NONCE}
    signing_input = (
        b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + "." + b64(json.dumps(body).encode())
    )
    forged = signing_input + "." + b64(hmac.new(pem, signing_input.encode(), hashlib.sha256).digest())
    with pytest.raises(SignInRefused):
        _verify(forged)


def _jwk(key: Any, kid: str, alg: str) -> dict[str, Any]:
    jwk: dict[str, Any] = (
        jwt.algorithms.RSAAlgorithm if alg == "RS256" else jwt.algorithms.ECAlgorithm
    ).to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig"}


def test_the_key_is_chosen_by_kid_and_type_and_a_published_private_key_is_never_used() -> None:
    jwks = {
        "keys": [_jwk(OTHER_RSA, "old", "RS256"), _jwk(RSA_KEY, "new", "RS256"), _jwk(EC_KEY, "ec", "ES256")]
    }
    key = choose_key(jwks, "new", "RS256")
    assert _verify(_token(), RSA_KEY)["sub"] and key.public_numbers() == RSA_KEY.public_key().public_numbers()
    assert choose_key(jwks, "ec", "RS256") is None  # an EC key for an RS256 token: not this one
    assert choose_key(jwks, "gone", "RS256") is None
    assert choose_key(jwks, None, "RS256") is None  # two RSA keys and no kid: which one signed is not known
    private = jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY, as_dict=True) | {"kid": "p"}
    assert choose_key({"keys": [private]}, "p", "RS256") is None
    with pytest.raises(SignInRefused, match="no keys list"):
        choose_key({"keys": "x"}, "p", "RS256")


def _document(**override: Any) -> dict[str, Any]:
    document = {
        "issuer": ISSUER,
        "authorization_endpoint": ISSUER + "/authorize",
        "token_endpoint": ISSUER + "/token",
        "jwks_uri": ISSUER + "/jwks",
        "id_token_signing_alg_values_supported": ["RS256", "HS256", "none"],
    }
    return document | override


def test_discovery_pins_the_algorithms_and_refuses_another_issuer_or_plain_http_endpoints() -> None:
    assert parse_discovery(_document(), ISSUER).algorithms == ("RS256",)
    assert parse_discovery(_document(id_token_signing_alg_values_supported=["ES256"]), ISSUER).algorithms == (
        "ES256",
    )
    with pytest.raises(SignInRefused, match="none of RS256, ES256"):
        parse_discovery(_document(id_token_signing_alg_values_supported=["HS256", "none"]), ISSUER)
    with pytest.raises(SignInRefused, match="another issuer"):
        parse_discovery(_document(issuer="https://idp.example.com/other"), ISSUER)
    with pytest.raises(SignInRefused, match="token_endpoint must be https"):
        parse_discovery(_document(token_endpoint="http://idp.example.com/token"), ISSUER)
    with pytest.raises(SignInRefused, match="no jwks_uri"):
        parse_discovery({k: v for k, v in _document().items() if k != "jwks_uri"}, ISSUER)


def test_the_pkce_challenge_is_rfc_7636s_s256() -> None:
    # RFC 7636, appendix B
    assert (
        code_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    )


def _config(**extra: Any) -> OidcConfig:
    return OidcConfig.model_validate(
        {
            "issuer": ISSUER,
            "client_id": CLIENT,
            "redirect_base_url": "https://console.example.com",
            "role_map": {"ops": "approver", "sre-leads": "admin", "everyone": "viewer"},
        }
        | extra
    )


def test_claims_map_to_a_prefixed_principal_and_the_highest_role_or_are_refused() -> None:
    who = identity(
        _config(), {"sub": "1", "preferred_username": "Dana", "groups": ["everyone", "sre-leads", "ops"]}
    )
    assert (who.principal, who.role, who.subject) == ("oidc-dana", "admin", "1")
    assert identity(_config(), {"sub": "1", "preferred_username": "dana", "groups": "ops"}).role == "approver"
    shared = identity(_config(principal_prefix="", principal_claim="sub"), {"sub": "erin", "groups": ["ops"]})
    assert shared.principal == "erin"
    with pytest.raises(SignInRefused, match=r"oidc-dana has no console role: the groups claim \('staff'\)"):
        identity(_config(), {"sub": "1", "preferred_username": "dana", "groups": ["staff"]})
    with pytest.raises(SignInRefused, match="no console role"):
        identity(_config(), {"sub": "1", "preferred_username": "dana", "groups": {"ops": 1}})
    with pytest.raises(SignInRefused, match="not usable as a console name"):
        identity(_config(), {"sub": "1", "preferred_username": "dana@example.com", "groups": ["ops"]})
    with pytest.raises(SignInRefused, match="no preferred_username claim"):
        identity(_config(), {"sub": "1", "groups": ["ops"]})


def test_the_subject_and_domain_allow_lists_refuse_whoever_they_leave_out() -> None:
    config = _config(allowed_domains=["Example.com"], allowed_subjects=["1", "2"])
    ok = {"sub": "1", "preferred_username": "dana", "groups": ["ops"], "email": "dana@example.com"}
    assert identity(config, ok).principal == "oidc-dana"
    with pytest.raises(SignInRefused, match=r"not among .* allowed_subjects"):
        identity(config, ok | {"sub": "3"})
    with pytest.raises(SignInRefused, match=r"'evil\.com' is not among"):
        identity(config, ok | {"email": "dana@evil.com"})
    with pytest.raises(SignInRefused, match="not verified"):
        identity(config, ok | {"email_verified": False})
    with pytest.raises(SignInRefused, match="no e-mail"):
        identity(config, {k: v for k, v in ok.items() if k != "email"})


def test_the_config_roles_are_the_consoles_roles() -> None:
    assert typing.get_args(ConsoleRole) == ROLES


@pytest.mark.parametrize(
    ("body", "key", "problem"),
    [
        (
            'issuer = "https://idp.example.com"\n',
            "console.oidc",
            "client_id and redirect_base_url must be set",
        ),
        ('issuer = "http://idp.example.com"\n', "console.oidc.issuer", "only to 127.0.0.1"),
        (
            'issuer = "https://i"\nclient_id = "c"\nredirect_base_url = "https://c"\n',
            "console.oidc",
            "role_map",
        ),
        ('role_map = { ops = "root" }\n', "console.oidc.role_map.ops", "viewer"),
        ('principal_prefix = "oidc:"\n', "console.oidc.principal_prefix", "ending in"),
        ('scopes = ["email"]\n', "console.oidc.scopes", "openid"),
        ("colour = 1\n", "console.oidc.colour", "unknown key"),
    ],
)
def test_a_bad_oidc_section_names_the_file_and_key(tmp_path: Path, body: str, key: str, problem: str) -> None:
    path = tmp_path / "aiops.toml"
    path.write_text("[console.oidc]\n" + body)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    message = str(caught.value)
    assert str(path) in message and f"'{key}'" in message and problem in message, message


def test_an_unknown_oidc_key_lists_the_sections_keys(tmp_path: Path) -> None:
    path = tmp_path / "aiops.toml"
    path.write_text("[console.oidc]\ncolour = 1\n")
    with pytest.raises(ConfigError, match="role_claim"):
        load_config_file(path)


def test_the_client_secret_file_is_read_once_and_a_missing_or_empty_one_names_the_file(
    tmp_path: Path,
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("  s3cret\n")
    assert read_secret(str(secret)) == "s3cret" and read_secret("") == ""
    with pytest.raises(
        InputError, match=r"missing: field 'client_secret_file': cannot read \(FileNotFoundError\)"
    ):
        read_secret(str(tmp_path / "missing"))
    secret.write_text("\n")
    with pytest.raises(InputError, match="the file is empty"):
        read_secret(str(secret))
