"""The OIDC provider of the tests (`oidc-provider-mock`) with PKCE (RFC 7636) enforced, as real providers do for a
public-facing client: the mock stores no code challenge and checked no verifier, so a console sending a wrong
`code_verifier` passed every test (issue 36). A WSGI layer in front of it remembers each authorization code's
`code_challenge` (S256 only) from the authorize request and its redirect, and refuses a token request whose
`code_verifier` does not hash to it (`invalid_grant`), or an authorize request without a challenge.

Run as `python -m tests.oidc_pkce_provider --host H --port P` (tests/oidc_helpers.py)."""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import io
import json
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, urlsplit

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
App = Callable[[Environ, StartResponse], Iterable[bytes]]


def s256(verifier: str) -> str:
    return (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode("ascii")).digest())
        .rstrip(b"=")
        .decode("ascii")
    )


class PkceCheck:
    def __init__(self, app: App) -> None:
        self.app = app
        self.challenges: dict[str, str] = {}  # code -> its S256 challenge
        self.lock = threading.Lock()

    @staticmethod
    def _refuse(start: StartResponse, description: str) -> list[bytes]:
        body = json.dumps({"error": "invalid_grant", "error_description": description}).encode()
        start("400 Bad Request", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    def __call__(self, environ: Environ, start: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path.endswith("/authorize"):
            return self._authorize(environ, start)
        if path.endswith("/token") and environ.get("REQUEST_METHOD") == "POST":
            return self._token(environ, start)
        return self.app(environ, start)

    def _authorize(self, environ: Environ, start: StartResponse) -> Iterable[bytes]:
        query = parse_qs(environ.get("QUERY_STRING", ""))
        challenge = (query.get("code_challenge") or [""])[0]
        if not challenge or (query.get("code_challenge_method") or [""])[0] != "S256":
            return self._refuse(start, "PKCE is required: code_challenge with code_challenge_method=S256")

        def remember(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            for name, value in headers:
                if name.lower() == "location":
                    code = (parse_qs(urlsplit(value).query).get("code") or [""])[0]
                    if code:
                        with self.lock:
                            self.challenges[code] = challenge
            return start(status, headers, *rest)

        return self.app(environ, remember)

    def _token(self, environ: Environ, start: StartResponse) -> Iterable[bytes]:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        form = parse_qs(body.decode("utf-8", "replace"))
        code = (form.get("code") or [""])[0]
        verifier = (form.get("code_verifier") or [""])[0]
        with self.lock:
            challenge = self.challenges.pop(code, None)
        if challenge is None or not verifier or not hmac.compare_digest(s256(verifier), challenge):
            return self._refuse(
                start, "PKCE verification failed: the code_verifier does not match the challenge"
            )
        environ["wsgi.input"] = io.BytesIO(body)
        return self.app(environ, start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"  # http on loopback, as the mock's own command allows
    import uvicorn
    from oidc_provider_mock import app

    flask_app = app(require_nonce=True)
    flask_app.wsgi_app = PkceCheck(flask_app.wsgi_app)  # type: ignore[method-assign]
    uvicorn.run(flask_app, interface="wsgi", host=args.host, port=args.port, log_config=None)


if __name__ == "__main__":
    main()
