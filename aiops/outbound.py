"""The product's one outbound HTTP client: every call aiops makes to another system (Prometheus and
VictoriaMetrics, webhooks, PagerDuty, Slack, Teams, a ticket sink, node dispatch, OIDC, a DCIM URL) goes
through `request` (docs/SECURITY.md, "Outbound HTTP").

What it guarantees, whoever the other side is:
- **No redirect is followed** unless the caller asks for `redirects="same-origin"`; then only to the same
  origin (scheme, host, port; RFC 6454), at most `MAX_REDIRECTS` times, with the same headers. A redirect to
  another origin is an `OutboundError`, never a request there: a credential cannot be carried elsewhere.
- **A byte cap** on every answer (`max_bytes`): a declared Content-Length over it is refused before the body
  is read, and a body that grows past it is cut off and refused.
- **One total deadline** (`timeout_s`) for connect, send and the whole answer (status line, headers, body):
  every receive and send is given only what is left of it, so a server that trickles a byte at a time is cut
  off when the deadline passes, not after its last byte (a per-receive timeout never ends). Not bounded by it:
  the DNS look-up (getaddrinfo takes no timeout); configure addresses or a local resolver where that matters.
- **One error type**, `aiops.errors.OutboundError(url, status, reason)`: the URL without credentials (no
  user:password, no query, and for a secret URL no path: `secret_url=True`), the HTTP status when there was an
  answer, and a reason that is one printable line. An answer's body quoted in a reason is cut to
  `EXCERPT_CHARS` characters and escaped (`excerpt`); every secret the request carried (the URL's path and
  query when secret, userinfo, credential headers' values, `secrets=`) is replaced by `***` first, so a
  receiver that echoes its URL or token cannot put them into a stored error.
- The environment's proxies (`https_proxy`, `http_proxy`, `no_proxy`) are honoured, as urllib did.

`request` returns the answer whatever its status (a node's 403 carries a JSON reason the caller reads);
`Response.raise_for_status()` turns a status other than 2xx into an `OutboundError`.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import socket
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiops.errors import OutboundError

Redirects = Literal["none", "same-origin"]
DEFAULT_MAX_BYTES = 1024 * 1024
MAX_REDIRECTS = 5
EXCERPT_CHARS = 300
READ_BYTES = 64 * 1024
USER_AGENT = "aiops/1"
# headers whose values are credentials: never shown in an error, whatever the other side echoes
SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "x-auth-token", "private-token"}
)
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, the default port filled in: what a credential is bound to."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


def safe_url(url: str, *, secret_url: bool = False) -> str:
    """`url` as errors and logs may show it: scheme, host and port, and the path unless the URL is a secret
    (a webhook's); never userinfo, the query or the fragment. Control characters are escaped."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "<an unusable URL>"
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{port}" if port is not None else "")
    path = "/***" if secret_url and parts.path not in ("", "/") else parts.path
    return _one_line(f"{parts.scheme}://{netloc}{path}", 200)


def excerpt(body: bytes | bytearray | str, secrets: Iterable[str] = (), limit: int = EXCERPT_CHARS) -> str:
    """An answer's body (or any hostile text) as one printable line: secrets replaced by `***`, cut to `limit`
    characters, every control, bidi and non-ASCII character escaped (`\\x1b`, `\\n`, `\\u202e`)."""
    text = body if isinstance(body, str) else bytes(body[: limit * 4]).decode("utf-8", "replace")
    text = redact(text, secrets)
    cut = len(text) > limit
    return _one_line(text[:limit], limit * 10) + ("..." if cut else "")


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every secret of at least 4 characters (longest first) replaced by `***`."""
    for secret in sorted({s for s in secrets if len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _one_line(text: str, limit: int) -> str:
    return text.encode("unicode_escape").decode("ascii")[:limit]


@dataclass(frozen=True)
class Response:
    url: str  # the URL that answered (after same-origin redirects), as sent: keep it out of errors
    status: int
    headers: Mapping[str, str]  # lowercased names
    body: bytes | bytearray  # as read (not copied: an answer may be tens of MB)
    shown_url: str = ""  # the URL as errors show it
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def error(self, reason: str) -> OutboundError:
        """An OutboundError about this answer (the caller's reason, e.g. "not a JSON object")."""
        return OutboundError(self.shown_url, self.status, redact(reason, self.secrets))

    def excerpt(self) -> str:
        return excerpt(self.body, self.secrets)

    def raise_for_status(self) -> Response:
        """Self when 2xx; else an OutboundError with the status and the body's escaped excerpt."""
        if self.ok:
            return self
        if self.status in _REDIRECT_STATUSES:
            where = safe_url(self.headers.get("location", ""), secret_url=True)
            raise self.error(f"redirected to {where}: not followed (configure the final URL)")
        raise self.error(self.excerpt() or http.client.responses.get(self.status, "error"))

    def json(self) -> Any:
        """The body as JSON; an OutboundError when it is not (or nests too deep for the parser)."""
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError):
            raise self.error(f"the answer is not JSON: {self.excerpt()}") from None

    def retry_after_s(self) -> float | None:
        """Retry-After in delta-seconds (RFC 9110 §10.2.3); an HTTP date is not read (the caller's backoff)."""
        value = self.headers.get("retry-after", "").strip()
        return float(value) if value.isascii() and value.isdigit() and len(value) <= 9 else None


class _DeadlineReader(io.RawIOBase):
    """The socket's receive side, each receive given only what is left of the deadline."""

    def __init__(self, owner: _DeadlineSocket) -> None:
        self.owner = owner

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.owner.arm()
        return int(self.owner.sock.recv_into(buffer))

    def close(self) -> None:
        if not self.closed:
            self.owner.release()
        super().close()


class _DeadlineSocket:
    """What http.client uses of a socket (sendall, makefile, close), each call bounded by one deadline."""

    def __init__(self, sock: socket.socket, deadline_s: float) -> None:
        self.sock, self.deadline_s = sock, deadline_s
        self.users = 1  # the connection, and each reader made (a socket's own makefile counts the same way)

    def arm(self) -> None:
        left_s = self.deadline_s - time.monotonic()
        if left_s <= 0:
            raise TimeoutError("the whole answer did not arrive within the deadline")
        self.sock.settimeout(left_s)

    def sendall(self, data: bytes) -> None:
        self.arm()
        self.sock.sendall(data)  # since 3.5 a socket's timeout bounds the whole sendall

    def makefile(self, mode: str = "rb", *args: Any, **kwargs: Any) -> io.BufferedReader:
        self.users += 1
        return io.BufferedReader(_DeadlineReader(self))

    def release(self) -> None:
        self.users -= 1
        if self.users <= 0:
            self.sock.close()

    def close(
        self,
    ) -> None:  # http.client closes the connection before the answer is read (Connection: close)
        self.release()


class _Connection(http.client.HTTPConnection):
    deadline_s = 0.0

    def connect(self) -> None:
        self.timeout = max(0.001, self.deadline_s - time.monotonic())
        super().connect()
        self.sock = _DeadlineSocket(self.sock, self.deadline_s)  # type: ignore[assignment]


class _TlsConnection(http.client.HTTPSConnection):
    deadline_s = 0.0

    def connect(self) -> None:
        self.timeout = max(0.001, self.deadline_s - time.monotonic())
        super().connect()  # the TLS handshake: CPython bounds it by the socket's timeout as a whole
        self.sock = _DeadlineSocket(self.sock, self.deadline_s)  # type: ignore[assignment]


def _proxy_for(scheme: str, host: str) -> str | None:
    """The environment's proxy for `scheme` (http_proxy/https_proxy), unless no_proxy names `host`."""
    proxy = urllib.request.getproxies_environment().get(scheme)
    if not proxy or urllib.request.proxy_bypass_environment(host):  # type: ignore[attr-defined]
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _basic(user: str, password: str) -> str:
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")


def _connection(
    url: str, headers: dict[str, str], deadline_s: float, context: ssl.SSLContext | None
) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
    """The connection for `url` (direct, or through the environment's proxy), the request target, the headers."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    host, port = parts.hostname, parts.port
    if scheme not in ("http", "https") or not host:
        raise ValueError("not an http(s) URL with a host")
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    sent = dict(headers)
    if parts.username is not None and not any(k.lower() == "authorization" for k in sent):
        sent["Authorization"] = _basic(parts.username, parts.password or "")  # to this origin only
    proxy = _proxy_for(scheme, host)
    connection: http.client.HTTPConnection
    if proxy is None:
        if scheme == "https":
            connection = _TlsConnection(host, port, context=context or ssl.create_default_context())
        else:
            connection = _Connection(host, port)
    else:
        via = urllib.parse.urlsplit(proxy)
        proxy_headers = {}
        if via.username is not None:
            proxy_headers["Proxy-Authorization"] = _basic(via.username, via.password or "")
        if scheme == "https":
            connection = _TlsConnection(
                via.hostname or "", via.port, context=context or ssl.create_default_context()
            )
            connection.set_tunnel(host, port, proxy_headers)
        else:
            connection = _Connection(via.hostname or "", via.port)
            target = urllib.parse.urlunsplit((scheme, parts.netloc.rsplit("@", 1)[-1], target, "", ""))
            sent.update(proxy_headers)
    connection.deadline_s = deadline_s  # type: ignore[attr-defined]
    return connection, target, sent


def _read(reply: http.client.HTTPResponse, max_bytes: int, shown: str) -> bytearray:
    declared = reply.getheader("Content-Length", "")
    if declared.isascii() and declared.isdigit() and int(declared) > max_bytes:
        raise OutboundError(shown, reply.status, f"the answer is larger than {max_bytes} bytes ({declared})")
    body = bytearray()
    while True:
        piece = reply.read1(min(READ_BYTES, max_bytes + 1 - len(body)))
        if not piece:
            return body
        body += piece
        if len(body) > max_bytes:
            raise OutboundError(shown, reply.status, f"the answer is larger than {max_bytes} bytes")


def _secrets(url: str, headers: Mapping[str, str], secret_url: bool, extra: Iterable[str]) -> tuple[str, ...]:
    parts = urllib.parse.urlsplit(url)
    found = [*extra]
    if parts.username is not None:
        basic = _basic(parts.username, parts.password or "")
        found += [basic, basic.split(" ", 1)[-1], *(p for p in (parts.password or "",) if p)]
        found.append(urllib.parse.unquote(parts.password or ""))
    if parts.query:
        found.append(parts.query)
        found += [v for _, v in urllib.parse.parse_qsl(parts.query)]
    if secret_url:
        found += [url, parts.path, *(p for p in parts.path.split("/") if len(p) >= 8)]
    for name, value in headers.items():
        if name.lower() in SECRET_HEADERS:
            found += [value, value.split(" ", 1)[-1]]
    return tuple(s for s in found if s)


def request(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
    redirects: Redirects = "none",
    secret_url: bool = False,
    secrets: Iterable[str] = (),
    context: ssl.SSLContext | None = None,
) -> Response:
    """One HTTP request and its whole answer, within `timeout_s` in all and `max_bytes` of body; the answer
    whatever its status, or an OutboundError when there is none (refused, unreachable, the deadline passed,
    too big, a redirect refused, a malformed URL or header). `secret_url`: the URL itself is a credential (a
    webhook's): errors show only its origin."""
    sent = {"User-Agent": USER_AGENT, "Connection": "close", **(headers or {})}
    hidden = _secrets(url, sent, secret_url, secrets)
    shown = safe_url(url, secret_url=secret_url)
    deadline_s = time.monotonic() + timeout_s
    current, verb, payload = url, method.upper(), body
    for _ in range(MAX_REDIRECTS + 1):
        connection: http.client.HTTPConnection | None = None
        try:
            connection, target, with_auth = _connection(current, sent, deadline_s, context)
            connection.request(verb, target, body=payload, headers=with_auth)
            reply = connection.getresponse()
            try:
                data = _read(reply, max_bytes, shown)
                answer = Response(
                    current,
                    int(reply.status),
                    {k.lower(): v for k, v in reply.getheaders()},
                    data,
                    shown,
                    hidden,
                )
            finally:
                reply.close()
        except OutboundError:
            raise
        except TimeoutError:
            raise OutboundError(shown, None, f"no whole answer within {timeout_s:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:  # refused, unreachable, malformed
            raise OutboundError(shown, None, excerpt(f"{type(exc).__name__}: {exc}", hidden)) from None
        finally:
            if connection is not None:
                connection.close()
        if answer.status not in _REDIRECT_STATUSES or redirects == "none":
            return answer
        location = urllib.parse.urljoin(current, answer.headers.get("location", ""))
        if origin(location) != origin(url):
            raise answer.error(
                f"redirected to another origin ({safe_url(location, secret_url=True)}): not followed"
            )
        if answer.status == 303 or (answer.status in (301, 302) and verb == "POST"):
            verb, payload = "GET", None  # RFC 9110 §15.4: a POST redirected by 301/302/303 becomes a GET
        current = location
    raise OutboundError(shown, None, f"more than {MAX_REDIRECTS} redirects")


def get(url: str, **options: Any) -> Response:
    return request("GET", url, **options)


def post_json(
    url: str, document: Any, *, headers: Mapping[str, str] | None = None, **options: Any
) -> Response:
    """POST `document` as JSON."""
    sent = {"Content-Type": "application/json", **(headers or {})}
    return request("POST", url, body=json.dumps(document).encode(), headers=sent, **options)


def post_form(
    url: str, form: Mapping[str, str], *, headers: Mapping[str, str] | None = None, **options: Any
) -> Response:
    """POST `form` as application/x-www-form-urlencoded."""
    sent = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
    return request("POST", url, body=urllib.parse.urlencode(form).encode(), headers=sent, **options)
