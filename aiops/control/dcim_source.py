"""The DCIM input as a service reads it each cycle: the same caps document `aiops dcim watch` reads from a file
(`{"rack1": {"kw": 18}, "fleet": {"clear": true}}`, see `dcim_signals.parse_dcim_signals`), from a file path or
an http(s) URL the site's DCIM serves; the changes recorded as `aiops dcim watch` records them; and, for the
eval and the tests, the twin's signals written back as that document at a given time.

An HTTP answer is hostile data: at most `MAX_BODY_BYTES`, read within `timeout_s` for the whole answer (a server
that trickles is cut off), JSON (YAML when the answer says so) parsed within `aiops.safeload`'s limits. Every
failure is one `DcimSignalError` naming the URL, never a crash: the caller keeps the signals in force.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from typing import Any

from aiops.control.dcim_signals import (
    DCIM_SIGNALS_SQL,
    DcimSignal,
    load_dcim_file,
    parse_dcim_signals,
    record_signal,
    signals_in_force,
)
from aiops.errors import DcimSignalError
from aiops.safeload import MAX_FILE_BYTES, decode_text, parse_json, parse_yaml
from aiops.sources.prometheus import escaped
from aiops.store import Store

MAX_BODY_BYTES = MAX_FILE_BYTES  # the file reader's limit (1 MiB): a caps document is a few hundred bytes
READ_BYTES = 64 * 1024


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A DCIM URL is configured exactly: a redirect elsewhere is an error, not followed."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirects)


def fetch_dcim_text(url: str, timeout_s: float = 5.0, max_bytes: int = MAX_BODY_BYTES) -> tuple[str, str]:
    """GET `url`: (its text, its content type), or a DcimSignalError naming the URL: no answer, a status other
    than 200, an answer over `max_bytes` or slower than `timeout_s` in all, not UTF-8."""
    request = urllib.request.Request(url, headers={"Accept": "application/json, application/yaml;q=0.5"})
    deadline_s = time.monotonic() + timeout_s
    body = bytearray()
    try:
        with _OPENER.open(request, timeout=timeout_s) as reply:
            status = int(reply.status)
            kind = str(reply.headers.get("Content-Type") or "")
            while len(body) <= max_bytes:
                if time.monotonic() > deadline_s:
                    raise DcimSignalError(url, "(http)", f"no whole answer within {timeout_s:g} s")
                piece = reply.read1(min(READ_BYTES, max_bytes + 1 - len(body)))
                if not piece:
                    break
                body += piece
    except urllib.error.HTTPError as exc:
        raise DcimSignalError(url, "(http)", f"HTTP {exc.code}: {escaped(exc.read(300))}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DcimSignalError(url, "(http)", f"no answer: {escaped(str(reason).encode())}") from None
    if status != 200:
        raise DcimSignalError(url, "(http)", f"HTTP {status}: {escaped(bytes(body))}")
    if len(body) > max_bytes:
        raise DcimSignalError(url, "(http)", f"answer larger than the limit of {max_bytes} bytes")
    return decode_text(bytes(body), url, DcimSignalError), kind


def read_dcim(
    source: str,
    ts_s: float,
    known_racks: Iterable[str] | None = None,
    *,
    timeout_s: float = 5.0,
    max_bytes: int = MAX_BODY_BYTES,
) -> list[DcimSignal]:
    """The DCIM signals a file path or an http(s) URL holds now, stamped `ts_s` and sourced `file:...` or
    `http:...`; every failure (unreachable, oversized, malformed, a scope or value that does not validate) is
    a DcimSignalError naming the source."""
    if not is_url(source):
        signals = load_dcim_file(source, ts_s, known_racks)
        return [DcimSignal(s.scope, s.kind, s.budget_kw, ts_s, f"file:{source}") for s in signals]
    text, kind = fetch_dcim_text(source, timeout_s, max_bytes)
    yaml_answer = "yaml" in kind.lower()
    data = (
        parse_yaml(text, source, DcimSignalError)
        if yaml_answer
        else parse_json(text, source, DcimSignalError)
    )
    signals = parse_dcim_signals(data if data is not None else {}, source, ts_s, known_racks)
    return [DcimSignal(s.scope, s.kind, s.budget_kw, ts_s, f"http:{source}") for s in signals]


def record_changes(store: Store, listed: list[DcimSignal], now: float, source: str) -> list[str]:
    """Record what changed since the signals in force: new or different signals, and a clear for each scope
    this source capped before and no longer lists (`aiops dcim watch`'s rule). One line per change."""
    in_force = signals_in_force(store)
    changes: list[str] = []
    for signal in listed:
        signal = DcimSignal(signal.scope, signal.kind, signal.budget_kw, now, source)
        if not signal.same_as(in_force.get(signal.scope)):
            record_signal(store, signal)
            kw = f" {signal.budget_kw:g} kW" if signal.budget_kw else ""
            changes.append(f"{signal.scope}: {signal.kind}{kw}")
    named = {s.scope for s in listed}
    for scope, old in in_force.items():
        if old.source == source and old.kind == "cap" and scope not in named:
            record_signal(store, DcimSignal(scope, "clear", None, now, source))
            changes.append(f"{scope}: clear (no longer listed)")
    return changes


def dcim_document(store: Store, at_s: float) -> dict[str, dict[str, Any]]:
    """The caps in force at `at_s` (the newest signal of each scope up to then is a cap) as the document a
    DCIM serves: `{"rack0": {"kw": 23.1}}`; a scope whose newest signal is a clear is left out (a reader
    clears what it capped and no longer sees listed)."""
    newest: dict[str, dict[str, Any]] = {}
    for row in store.query(DCIM_SIGNALS_SQL, [at_s]):
        newest[str(row["scope"])] = row
    return {
        scope: {"kw": float(row["budget_kw"])}
        for scope, row in sorted(newest.items())
        if row["kind"] == "cap" and row["budget_kw"] is not None
    }
