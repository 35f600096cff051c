"""The OpenID Connect relying party behind the console's single sign-on (`[console.oidc]`, docs/CONSOLE.md):
discovery, the authorization request (code flow with PKCE S256, state and nonce), the code exchange, and the
ID token's verification. The views that use it are `aiops.console.oidc_signin`.

Discovery reads `<issuer>/.well-known/openid-configuration` at the first sign-in (not at start: a provider
that is down then only refuses sign-ins) and keeps it an hour; its `issuer` must be the configured one, byte
for byte. The ID token is verified with PyJWT against the provider's JWKS: the signature, with the algorithm
pinned to what the provider announces among RS256 and ES256 (never "none", never an HMAC with a public key),
the key chosen by `kid` and of that algorithm's type; `iss`, `aud` (and `azp` when several audiences), `exp`,
`iat` (not in the future, not older than `MAX_TOKEN_AGE_S`) and `nonce`. An unknown `kid` fetches the JWKS
again (the provider rotated its keys), at most once per `JWKS_REFRESH_S`.

Everything the provider sends is hostile data: every request goes through aiops/outbound.py (no redirect
followed, `MAX_BODY_BYTES` per answer, `timeout_s` for the whole exchange: a token endpoint that answers 300 MB
or trickles is cut off), responses are JSON, nothing is evaluated, and the `SignInRefused` messages name what
failed, never a token or the client secret.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus, urlencode, urlsplit

import jwt

from aiops import outbound
from aiops.config_oidc import OidcConfig, check_url
from aiops.errors import OutboundError, SignInRefused

ALGORITHMS = ("RS256", "ES256")  # what the console accepts; the provider's announced list narrows it
KEY_TYPES = {"RS256": "RSA", "ES256": "EC"}
DISCOVERY_TTL_S = 3600.0
JWKS_REFRESH_S = 30.0
LEEWAY_S = 60  # clock skew allowed on exp and iat
MAX_TOKEN_AGE_S = 600.0  # an ID token issued longer ago than this is refused (a replayed response)
MAX_BODY_BYTES = 512 * 1024


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def code_challenge(verifier: str) -> str:
    """The S256 code_challenge of a PKCE `verifier` (RFC 7636)."""
    return _b64(hashlib.sha256(verifier.encode("ascii")).digest())


def pkce_pair() -> tuple[str, str]:
    """(code_verifier, its S256 code_challenge): 32 random bytes, base64url."""
    verifier = _b64(secrets.token_bytes(32))
    return verifier, code_challenge(verifier)


@dataclass(frozen=True)
class Discovery:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    algorithms: tuple[str, ...]


def parse_discovery(document: Any, issuer: str) -> Discovery:
    """The parts of a discovery document the console uses; `SignInRefused` when it does not fit."""
    if not isinstance(document, dict):
        raise SignInRefused("the provider's discovery document is not a JSON object")
    if document.get("issuer") != issuer:
        raise SignInRefused(
            f"the provider's discovery document names another issuer ({str(document.get('issuer'))[:100]!r})"
        )
    urls = {}
    for key in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
        value = document.get(key)
        if not isinstance(value, str):
            raise SignInRefused(f"the provider's discovery document has no {key}")
        try:
            check_url(value, key)
        except ValueError as exc:
            raise SignInRefused(f"the provider's {exc}") from None
        urls[key] = value
    announced = document.get("id_token_signing_alg_values_supported", ["RS256"])
    if not isinstance(announced, list):
        raise SignInRefused("the provider's id_token_signing_alg_values_supported is not a list")
    algorithms = tuple(a for a in ALGORITHMS if a in announced)
    if not algorithms:
        raise SignInRefused(
            f"the provider signs ID tokens with none of {', '.join(ALGORITHMS)} "
            f"(it announces {', '.join(str(a)[:20] for a in announced[:5])})"
        )
    return Discovery(
        issuer, urls["authorization_endpoint"], urls["token_endpoint"], urls["jwks_uri"], algorithms
    )


def _json(response: outbound.Response, what: str) -> Any:
    try:
        return json.loads(response.body)
    except (ValueError, RecursionError):
        raise SignInRefused(f"the provider's {what} is not JSON (HTTP {response.status})") from None


def _unreachable(exc: OutboundError, what: str) -> SignInRefused:
    if "larger than" in exc.reason:
        return SignInRefused(f"the provider's {what} is larger than {MAX_BODY_BYTES // 1024} KiB")
    if exc.status is not None:  # a redirect elsewhere, or an answer cut short
        return SignInRefused(f"the provider's {what} answered HTTP {exc.status} without a usable answer")
    why = "it did not answer in time" if "within" in exc.reason else "connection failed"
    return SignInRefused(f"the sign-in provider cannot be reached ({why})")


def choose_key(jwks: Any, kid: str | None, algorithm: str) -> Any:
    """The public key of `jwks` that `kid` names, of `algorithm`'s key type; None when there is none."""
    keys = jwks.get("keys") if isinstance(jwks, dict) else None
    if not isinstance(keys, list):
        raise SignInRefused("the provider's JWKS has no keys list")
    candidates = [
        k
        for k in keys
        if isinstance(k, dict)
        and k.get("kty") == KEY_TYPES[algorithm]
        and k.get("use", "sig") == "sig"
        and k.get("alg", algorithm) == algorithm
        and (kid is None or k.get("kid") == kid)
        and "d" not in k  # a private key published by mistake is not used
    ]
    if len(candidates) != 1:  # none, or (without a kid) several: which one signed is not known
        return None
    try:
        return jwt.PyJWK(candidates[0], algorithm=algorithm).key
    except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
        raise SignInRefused("the provider's signing key cannot be read") from None


class Provider:
    """One configured provider: discovery and keys cached, the flow's requests, the ID token's checks."""

    def __init__(self, config: OidcConfig, client_secret: str) -> None:
        self.config = config
        self.client_secret = client_secret
        self.redirect_uri = config.redirect_base_url + "/oidc/callback"
        self._lock = threading.Lock()
        self._discovery: tuple[float, Discovery] | None = None
        self._jwks: tuple[float, Any] | None = None

    def _get(self, url: str, what: str) -> Any:
        try:
            response = outbound.get(
                url,
                headers={"accept": "application/json"},
                timeout_s=self.config.timeout_s,
                max_bytes=MAX_BODY_BYTES,
            )
        except OutboundError as exc:
            raise _unreachable(exc, what) from None
        if response.status != 200:
            raise SignInRefused(f"the provider's {what} answered HTTP {response.status}")
        return _json(response, what)

    def discovery(self) -> Discovery:
        now = time.monotonic()
        with self._lock:
            if self._discovery is not None and now - self._discovery[0] < DISCOVERY_TTL_S:
                return self._discovery[1]
        document = self._get(self.config.issuer + "/.well-known/openid-configuration", "discovery document")
        found = parse_discovery(document, self.config.issuer)
        with self._lock:
            self._discovery = (now, found)
        return found

    def authorization_url(self, state: str, nonce: str, code_challenge: str) -> str:
        found = self.discovery()
        query = urlencode(
            {
                "response_type": "code",
                "client_id": self.config.client_id,
                "redirect_uri": self.redirect_uri,
                "scope": " ".join(self.config.scopes),
                "state": state,
                "nonce": nonce,
                "code_challenge": code_challenge,
                "code_challenge_method": "S256",
            }
        )
        separator = "&" if urlsplit(found.authorization_endpoint).query else "?"
        return found.authorization_endpoint + separator + query

    def exchange(self, code: str, code_verifier: str) -> str:
        """The ID token the token endpoint gives for `code` (the raw JWT, not yet verified)."""
        found = self.discovery()
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": self.redirect_uri,
            "code_verifier": code_verifier,
        }
        headers = {"accept": "application/json"}
        if self.client_secret:  # client_secret_basic: each part form-encoded first (RFC 6749 2.3.1)
            pair = f"{quote_plus(self.config.client_id)}:{quote_plus(self.client_secret)}"
            headers["authorization"] = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
        else:
            form["client_id"] = self.config.client_id
        try:
            response = outbound.post_form(
                found.token_endpoint,
                form,
                headers=headers,
                timeout_s=self.config.timeout_s,  # the whole exchange: connect, send, the whole answer
                max_bytes=MAX_BODY_BYTES,
                secrets=(self.client_secret, code, code_verifier),
            )
        except OutboundError as exc:
            raise _unreachable(exc, "token response") from None
        body = _json(response, "token response")
        if response.status != 200:
            error = body.get("error") if isinstance(body, dict) else None
            raise SignInRefused(
                f"the provider refused the code (HTTP {response.status}, {outbound.excerpt(str(error), limit=60)})"
            )
        token = body.get("id_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise SignInRefused("the provider's token response has no id_token (is 'openid' in scopes?)")
        return token

    def _key(self, jwks_uri: str, kid: str | None, algorithm: str) -> Any:
        """The signing key from the cached JWKS; fetched again when absent there (the provider rotated its
        keys), at most once per `JWKS_REFRESH_S`."""
        now = time.monotonic()
        with self._lock:
            cached = self._jwks
        if cached is not None and now - cached[0] < DISCOVERY_TTL_S:
            key = choose_key(cached[1], kid, algorithm)
            if key is not None:
                return key
            if now - cached[0] < JWKS_REFRESH_S:
                raise SignInRefused("the ID token's signing key is not among the provider's keys")
        jwks = self._get(jwks_uri, "JWKS")
        with self._lock:
            self._jwks = (now, jwks)
        key = choose_key(jwks, kid, algorithm)
        if key is None:
            raise SignInRefused("the ID token's signing key is not among the provider's keys")
        return key

    def verify(self, token: str, nonce: str) -> dict[str, Any]:
        """The ID token's claims, once every check passed; `SignInRefused` naming the first that failed."""
        found = self.discovery()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise SignInRefused("the ID token is not a JWT") from None
        algorithm = header.get("alg")
        if algorithm not in found.algorithms:
            raise SignInRefused(
                f"the ID token is signed with {str(algorithm)[:20]!r}, not {' or '.join(found.algorithms)}"
            )
        kid = header.get("kid")
        key = self._key(found.jwks_uri, kid if isinstance(kid, str) else None, algorithm)
        return verify_claims(
            token, key, algorithm, issuer=found.issuer, audience=self.config.client_id, nonce=nonce
        )


def verify_claims(
    token: str,
    key: Any,
    algorithm: str,
    *,
    issuer: str,
    audience: str,
    nonce: str,
    now_s: float | None = None,
) -> dict[str, Any]:
    """The claims of `token` signed by `key` with `algorithm` (one of `ALGORITHMS`), for `audience` from
    `issuer`, carrying `nonce`; `SignInRefused` naming what failed."""
    if algorithm not in ALGORITHMS:
        raise SignInRefused(f"{algorithm[:20]!r} is not an algorithm the console accepts")
    try:
        claims: dict[str, Any] = jwt.decode(
            token,
            key=key,
            algorithms=[algorithm],
            audience=audience,
            issuer=issuer,
            leeway=LEEWAY_S,
            options={"require": ["exp", "iat", "iss", "aud", "sub"]},
        )
    except jwt.InvalidAudienceError:
        raise SignInRefused("the ID token was issued for another client (aud)") from None
    except jwt.InvalidIssuerError:
        raise SignInRefused("the ID token comes from another issuer (iss)") from None
    except jwt.ExpiredSignatureError:
        raise SignInRefused("the ID token has expired (exp)") from None
    except jwt.ImmatureSignatureError:
        raise SignInRefused("the ID token is dated in the future (iat or nbf)") from None
    except jwt.InvalidSignatureError:
        raise SignInRefused("the ID token's signature does not verify") from None
    except jwt.MissingRequiredClaimError as exc:
        raise SignInRefused(f"the ID token has no {exc.claim} claim") from None
    except jwt.PyJWTError as exc:
        raise SignInRefused(f"the ID token is not valid ({type(exc).__name__})") from None
    now = time.time() if now_s is None else now_s
    iat = claims.get("iat")
    if not isinstance(iat, int | float) or now - float(iat) > MAX_TOKEN_AGE_S + LEEWAY_S:
        raise SignInRefused("the ID token was issued too long ago (iat)")
    got = claims.get("nonce")
    if not isinstance(got, str) or not secrets.compare_digest(got.encode(), nonce.encode()):
        raise SignInRefused("the ID token's nonce is not this sign-in's")
    aud = claims.get("aud")
    if isinstance(aud, list) and len(aud) > 1 and claims.get("azp") != audience:
        raise SignInRefused("the ID token names several audiences and another authorized party (azp)")
    if not isinstance(claims.get("sub"), str) or not claims["sub"]:
        raise SignInRefused("the ID token's sub is not a string")
    return claims
