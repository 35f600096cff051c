"""The DCIM input as a service reads it each cycle: the same caps document `aiops dcim watch` reads from a file
(`{"rack1": {"kw": 18}, "fleet": {"clear": true}}`, see `dcim_signals.parse_dcim_signals`), from a file path or
an http(s) URL the site's DCIM serves; the changes recorded as `aiops dcim watch` records them; and, for the
eval and the tests, the twin's signals written back as that document at a given time.

An HTTP answer is hostile data: at most `MAX_BODY_BYTES`, read within `timeout_s` for the whole answer (a server
that trickles is cut off), JSON (YAML when the answer says so) parsed within `aiops.safeload`'s limits. Every
failure is one `DcimSignalError` naming the URL, never a crash: the caller keeps the signals in force.
"""

from __future__ import annotations

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
from aiops.errors import DcimSignalError, OutboundError
from aiops.outbound import request
from aiops.safeload import MAX_FILE_BYTES, decode_text, parse_json, parse_yaml
from aiops.store import Store

MAX_BODY_BYTES = MAX_FILE_BYTES  # the file reader's limit (1 MiB): a caps document is a few hundred bytes


def is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def fetch_dcim_text(url: str, timeout_s: float = 5.0, max_bytes: int = MAX_BODY_BYTES) -> tuple[str, str]:
    """GET `url` through the product's one outbound client (aiops/outbound.py: no redirect followed, one
    deadline for the whole answer, a byte cap): (its text, its content type), or a DcimSignalError naming the
    URL: no answer, a status other than 200, an answer over `max_bytes` or slower than `timeout_s` in all, not
    UTF-8."""
    try:
        answer = request(
            "GET",
            url,
            headers={"Accept": "application/json, application/yaml;q=0.5"},
            timeout_s=timeout_s,
            max_bytes=max_bytes,
        )
    except OutboundError as exc:
        said = "no answer" if exc.status is None else f"HTTP {exc.status}"
        raise DcimSignalError(url, "(http)", f"{said}: {exc.reason}") from None
    if answer.status != 200:
        raise DcimSignalError(url, "(http)", f"HTTP {answer.status}: {answer.excerpt()}")
    kind = str(answer.headers.get("content-type") or "")
    return decode_text(bytes(answer.body), url, DcimSignalError), kind


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
