"""The one transport: `send(delivery) -> Result`, an HTTP POST of the stored body with urllib.request. No
store, no retries (the queue decides those), no redirects followed (a redirected POST becomes a GET in
urllib, and would carry the bearer token to wherever the redirect points).

The URL and the token come from the configuration only; incident text travels in the JSON body, never in
the URL or a header. A receiver's error answer is stored (`notifications.last_error`) escaped, cut, and with
the URL, its path and the token replaced by `***` (aiops.outbound.excerpt): a receiver that echoes its secret
URL cannot put it where the chat's SQL tool, and so a model, reads. A kind whose secret belongs in the body (PagerDuty's routing key, `SinkFormat.
secret_in_body`) gets it added here, as the body leaves; every other kind's token is a bearer header.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.parse
import urllib.request
from email.message import Message

from aiops import outbound
from aiops.service.notify_payloads import SINK_FORMATS
from aiops.service.notify_queue import Delivery, Result

USER_AGENT = "aiops-notify/1"
# The receiver rejected this body (RFC 9110 §15.5.1 400, §15.5.14 413, RFC 4918 §11.2 422): sending the same
# bytes again cannot succeed. Every other failure (5xx, 408, 429, 401/403/404 while a receiver is being set
# up, connection errors, timeouts) is retried until `give_up_after_s`.
PERMANENT_STATUS_CODES = frozenset({400, 413, 422})
_SNIPPET_BYTES = 200


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


def _retry_after_s(headers: Message | None) -> float | None:
    """Retry-After in delta-seconds (RFC 9110 §10.2.3); an HTTP date is ignored (the backoff applies)."""
    value = headers.get("Retry-After") if headers is not None else None
    if value is None or not (value.strip().isascii() and value.strip().isdigit()):
        return None
    return float(value.strip())


def _secrets(delivery: Delivery) -> list[str]:
    """What a receiver may echo that must never be stored (`notifications.last_error` is readable by the chat's
    SQL tool): the URL (a webhook's path is its credential), its path segments, and the token."""
    parts = urllib.parse.urlsplit(delivery.url)
    return [
        delivery.url,
        parts.path,
        parts.query,
        *(p for p in parts.path.split("/") if len(p) >= 8),
        delivery.token,
    ]


def _snippet(error: urllib.error.HTTPError, delivery: Delivery) -> str:
    try:
        body = error.read(_SNIPPET_BYTES * 4)
    except (OSError, http.client.HTTPException):
        return ""
    return outbound.excerpt(body, _secrets(delivery), limit=_SNIPPET_BYTES).strip()


def send(delivery: Delivery) -> Result:
    """POST `delivery.body` as JSON with the configured timeout and the sink's secret (when set): in the body
    for a kind that puts it there, else as a bearer token."""
    headers = {"Content-Type": "application/json", "User-Agent": USER_AGENT}
    body = delivery.body
    secret_in_body = SINK_FORMATS[delivery.sink_kind].secret_in_body
    if secret_in_body is not None:
        body = secret_in_body(body, delivery.token)
    elif delivery.token:
        headers["Authorization"] = f"Bearer {delivery.token}"
    request = urllib.request.Request(delivery.url, data=body, headers=headers, method="POST")
    try:
        # Built per call: its ProxyHandler reads $https_proxy/$no_proxy now, not when this module was imported.
        opener = urllib.request.build_opener(_NoRedirect)
        with opener.open(request, timeout=delivery.timeout_s) as response:
            response.read(64 * 1024)
            return Result("delivered", int(response.status))
    except urllib.error.HTTPError as exc:
        snippet = _snippet(exc, delivery)
        message = f"HTTP {exc.code}" + (f": {snippet}" if snippet else "")
        if 300 <= exc.code < 400:
            return Result(
                "failed", exc.code, f"{message} (redirects are not followed: configure the final URL)"
            )
        if exc.code in PERMANENT_STATUS_CODES:
            return Result("failed", exc.code, message)
        return Result("retry", exc.code, message, _retry_after_s(exc.headers))
    except ValueError as exc:  # an unusable URL or token (http.client refuses the header)
        return Result("failed", None, f"invalid request: {outbound.excerpt(str(exc), _secrets(delivery))}")
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return Result(
            "retry", None, f"{type(exc).__name__}: {outbound.excerpt(str(reason), _secrets(delivery))}"
        )
