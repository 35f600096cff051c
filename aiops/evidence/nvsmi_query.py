"""`nvidia-smi --query-gpu=<fields> --format=csv` output as events.

The fields are named by the CSV header nvidia-smi prints (`index, name, temperature.gpu, power.draw [W]`: a
unit in brackets) or, with `--format=csv,noheader`, by the `--query-gpu=` list of the command line echoed
above the rows; a row's values follow the fields in order (`nvidia-smi --help-query-gpu` documents each). The
GPU a row names is its `index` (`GPU<n>`), else its `pci.bus_id`. Rows before the fields are known are not
read (they could be any CSV).

What a field says (`nvidia-smi --help-query-gpu`):
- `gpu_recovery_action`: the driver's recovery action for the GPU (NVML `nvmlDeviceGetGpuRecoveryAction`,
  nvml.h `nvmlDeviceGpuRecoveryAction_t`: none, GPU reset, node reboot, drain P2P, drain and reset). Anything
  but `None` is the driver asking for a recovery: `reset_required` code 1 (the same event as `nvidia-smi -q`'s
  `Reset Required: Yes`).
- `reset_status.reset_required`, `reset_status.drain_and_reset_recommended`: "Either of these being 'Yes'
  indicates that an unrecoverable error has occurred": `reset_required`.
- `remapped_rows.pending`, `remapped_rows.failure`: `remap_pending`, `remap_failure` (code 1 on `Yes`).
- `ecc.errors.uncorrected.volatile.total` above 0: `ecc_uncorrectable`.
- `temperature.gpu`: `temperature`.
A line gives one event: its abnormal field first (in the order above), else its temperature, else a field
line (`nvsmi_field`, which the generic classifier still reads: a `[GPU is lost]` value is its `gpu_lost`).
Rows of fields none of which is one of those (`READ_FIELDS`: `index, clocks.sm, power.draw`) are not read
(None): their values were not checked, and the verdict knows it (aiops/evidence/records.py)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

# The command line, as typed or echoed after a shell prompt: `nvidia-smi --query-gpu=index,name --format=csv`
COMMAND = re.compile(r"(?:^|[$#>]\s{0,4})nvidia-smi\b[^|]{0,200}?--query-gpu[= ](?P<fields>[\w.,]+)")
_FIELD = r"[a-z][a-z0-9_]{0,60}(?:\.[a-z0-9_]{1,60}){0,5}(?: \[[^\]]{1,20}\])?"
# A field only nvidia-smi names so, at a field's place in a row of fields.
_KNOWN = (
    r"(?:^|,\s?)(?:index|uuid|pci\.bus_id|gpu_recovery_action|pstate|driver_version|temperature\.gpu|"
    r"utilization\.gpu|memory\.(?:used|total|free)|power\.draw|fan\.speed|clocks\.\w+|"
    r"clocks_(?:throttle|event)_reasons\.\w+|ecc\.errors\.[\w.]+|retired_pages\.\w+|remapped_rows\.\w+|"
    r"reset_status\.\w+)(?: \[|,|\s*$)"
)
# A header row: nvidia-smi's field names (lower case, dotted), each with its unit, one of them a field only
# nvidia-smi names so (an arbitrary lower-case CSV header is not taken for one).
HEADER = re.compile(rf"^(?=.*?{_KNOWN})\s*{_FIELD}(?:,\s?{_FIELD})+\s*$")
_UNIT = re.compile(r"\s*\[[^\]]*\]$")
# The fields a row is read for (the module docstring); `index`, `pci.bus_id` only say which GPU it is.
READ_FIELDS = frozenset(
    {
        "gpu_recovery_action",
        "reset_status.reset_required",
        "reset_status.drain_and_reset_recommended",
        "remapped_rows.failure",
        "remapped_rows.pending",
        "ecc.errors.uncorrected.volatile.total",
        "temperature.gpu",
    }
)
_BLANK = frozenset({"none", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", ""})
_YES = "yes"


class _State:
    def __init__(self) -> None:
        self.fields: list[str] | None = None


def fields_of(header: str) -> list[str]:
    """A header row's field names, units cut: `power.draw [W]` -> `power.draw`."""
    return [_UNIT.sub("", part.strip()) for part in header.split(",")]


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    s = _State()
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        text = raw.strip()
        if (m := COMMAND.search(text)) is not None:
            # with `noheader` the rows follow at once; else the header row names the fields (again)
            s.fields = [f for f in m.group("fields").split(",") if f]
            yield LogEvent(kind="nvsmi_field", detail={"fields": ",".join(s.fields)}, **base)
            continue
        if HEADER.match(text):
            s.fields = fields_of(text)
            yield LogEvent(kind="nvsmi_field", detail={"fields": ",".join(s.fields)}, **base)
            continue
        if s.fields is None or not text or READ_FIELDS.isdisjoint(s.fields):
            yield None  # no fields known yet, or none this parser reads
            continue
        values = [part.strip() for part in text.split(",")]
        if len(values) < len(s.fields):
            yield None  # not one of the rows: fewer values than fields
            continue
        yield _row(dict(zip(s.fields, values, strict=False)), base)


def _row(row: dict[str, str], base: dict[str, Any]) -> LogEvent:
    index = row.get("index", "")
    component = f"GPU{index}" if index.isdigit() else (row.get("pci.bus_id") or None)
    found: list[tuple[str, int | None, float | None, str]] = []
    action = row.get("gpu_recovery_action")
    if action is not None:
        # a value the poster annotated (`Reset   <= ...`) is read by its first word group
        word = re.split(r"\s{2,}", action)[0]
        if word.lower() not in _BLANK:
            found.append(("reset_required", 1, None, "gpu_recovery_action"))
    for key in ("reset_status.reset_required", "reset_status.drain_and_reset_recommended"):
        if row.get(key, "").lower() == _YES:
            found.append(("reset_required", 1, None, key))
    for key, kind in (("remapped_rows.failure", "remap_failure"), ("remapped_rows.pending", "remap_pending")):
        if row.get(key, "").lower() == _YES:
            found.append((kind, 1, None, key))
    ecc = _number(row.get("ecc.errors.uncorrected.volatile.total"))
    if ecc is not None and ecc > 0:
        found.append(("ecc_uncorrectable", None, ecc, "ecc.errors.uncorrected.volatile.total"))
    temperature = _number(row.get("temperature.gpu"))
    if temperature is not None:
        found.append(("temperature", None, temperature, "temperature.gpu"))
    if not found:
        return LogEvent(kind="nvsmi_field", component=component, **base)
    kind, code, value, key = found[0]
    detail = {"field": key, "value": row.get(key, "")}
    if kind == "temperature":
        detail["key"] = "GPU Current Temp"  # as nvidia-smi -q names it (rules_gpu.thermal reads the key)
    return LogEvent(kind=kind, component=component, code=code, value=value, detail=detail, **base)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    m = re.match(r"^(-?\d+(?:\.\d+)?)", text)
    return float(m.group(1)) if m else None
