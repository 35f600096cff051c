"""The one transport of the notification sinks: `send(delivery) -> Result`, an HTTP POST of the stored body through
`aiops.outbound` (no redirect followed, a byte cap on the answer, one total deadline, one error type). No store,
no retries (the queue decides those).

The URL and the token come from the configuration only; incident text travels in the JSON body, never in the
URL or a header. A kind whose secret belongs in the body (PagerDuty's routing key, `SinkFormat.
secret_in_body`) gets it added here, as the body leaves; every other kind's token is a bearer header. A webhook
URL is treated as a secret (Slack's and Teams' carry their signature): errors show its origin only.
"""

from __future__ import annotations

from aiops import outbound
from aiops.errors import OutboundError
from aiops.integrations.payloads import SINK_FORMATS
from aiops.integrations.sink_queue import Delivery, Result

USER_AGENT = "aiops-notify/1"
# The receiver rejected this body (RFC 9110 §15.5.1 400, §15.5.14 413, RFC 4918 §11.2 422): sending the same
# bytes again cannot succeed. Every other failure (5xx, 408, 429, 401/403/404 while a receiver is being set
# up, connection errors, timeouts) is retried until `give_up_after_s`.
PERMANENT_STATUS_CODES = frozenset({400, 413, 422})
ANSWER_BYTES = 64 * 1024  # a receiver's answer is read up to this (its words, clipped, go into last_error)
_SNIPPET_CHARS = 200


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
    try:
        answer = outbound.request(
            "POST",
            delivery.url,
            body=body,
            headers=headers,
            timeout_s=delivery.timeout_s,
            max_bytes=ANSWER_BYTES,
            secret_url=True,
            secrets=[delivery.token] if delivery.token else [],
        )
    except OutboundError as exc:  # no usable answer: refused, unreachable, the deadline passed, too big
        if exc.status is not None and 200 <= exc.status < 300:
            return Result("delivered", exc.status)  # accepted; only its answer was oversized
        if exc.status is not None and exc.status < 500:
            return Result("failed", exc.status, str(exc))
        return Result("retry", exc.status, str(exc))
    if answer.ok:
        return Result("delivered", answer.status)
    snippet = outbound.excerpt(answer.body, answer.secrets, _SNIPPET_CHARS)
    message = f"HTTP {answer.status}" + (f": {snippet}" if snippet else "")
    if 300 <= answer.status < 400:
        return Result(
            "failed", answer.status, f"{message} (redirects are not followed: configure the final URL)"
        )
    if answer.status in PERMANENT_STATUS_CODES:
        return Result("failed", answer.status, message)
    return Result("retry", answer.status, message, answer.retry_after_s())
