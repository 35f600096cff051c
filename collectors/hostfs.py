"""What every real-host collector shares: reading /sys and /proc under a root path (the node_exporter way, so
tests point collectors at fixture trees), and turning what goes wrong into `collector_errors` rows instead of
exceptions.

- A file a reading needs that is missing or unreadable, or whose text does not parse, is a row
  (`missing`, `unreadable`, `malformed`), reported when the problem starts and again only after it has cleared
  and come back: a broken file read every second is one row, not one per second.
- A source this host does not have (no InfiniBand, no hwmon, no NVML driver) is one `unavailable` row for the
  life of the collector (`ErrorLog.once`), never a row per interval.
- Optional attributes (a counter one driver has and another lacks; `speed` of a link that is down, which
  answers EINVAL) are NULL without a row.
- `HostCollector.rows` never raises: anything unexpected becomes an `internal` row.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import TYPE_CHECKING

from collectors.base import Row, RowBatch, to_arrow
from collectors.schema import columns

if TYPE_CHECKING:
    import pyarrow as pa

ERROR_COLUMNS = columns("collector_errors")

# Errors an optional attribute answers when it simply has no value here: absent, or not meaningful now
# (`speed` of a link that is down reads EINVAL, drivers/net/... ethtool_get_link_ksettings), or not supported.
_ABSENT = {errno.ENOENT, errno.EINVAL, errno.ENODATA, errno.EOPNOTSUPP, errno.ENOTDIR}

Key = tuple[str | None, str, str]


class ErrorLog:
    """The `collector_errors` rows of one collector for one interval (`begin` ... `end`)."""

    def __init__(self, collector: str) -> None:
        self.collector = collector
        self._now_ts_s = 0.0
        self._rows: list[Row] = []
        self._active: set[Key] = set()  # problems reported and still present at the last interval
        self._seen: set[Key] = set()
        self._once: set[Key] = set()

    def begin(self, now_ts_s: float) -> None:
        self._now_ts_s = now_ts_s
        self._rows = []
        self._seen = set()

    def report(self, component: str | None, error: str, detail: str, key: str | None = None) -> None:
        """A problem seen this interval: a row when it is new (or back after it cleared)."""
        found: Key = (component, error, detail if key is None else key)
        self._seen.add(found)
        if found not in self._active:
            self._active.add(found)
            self._rows.append((self._now_ts_s, self.collector, component, error, detail))

    def event(self, component: str | None, error: str, detail: str) -> None:
        """Something that happened (not a lasting state): a row every time."""
        self._rows.append((self._now_ts_s, self.collector, component, error, detail))

    def once(self, component: str | None, error: str, detail: str) -> None:
        """A status (a source this host does not have): one row for the life of the collector."""
        found: Key = (component, error, "")
        if found not in self._once:
            self._once.add(found)
            self._rows.append((self._now_ts_s, self.collector, component, error, detail))

    def end(self) -> list[Row]:
        self._active &= self._seen  # a problem that cleared is reported again if it comes back
        rows, self._rows = self._rows, []
        return rows


class Files:
    """Reads text attributes, reporting what goes wrong to an `ErrorLog` under a component name."""

    def __init__(self, errors: ErrorLog) -> None:
        self.errors = errors

    def text(self, path: Path, component: str | None, *, required: bool = True) -> str | None:
        try:
            return path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError as exc:
            if not required and exc.errno in _ABSENT:
                return None
            if exc.errno == errno.ENOENT:
                self.errors.report(component, "missing", f"{path} does not exist", key=str(path))
            else:
                reason = exc.strerror or type(exc).__name__
                self.errors.report(component, "unreadable", f"{path}: {reason}", key=str(path))
            return None

    def integer(self, path: Path, component: str | None, *, required: bool = True) -> int | None:
        text = self.text(path, component, required=required)
        if text is None:
            return None
        try:
            return int(text, 0) if text.startswith("0x") else int(text)
        except ValueError:
            self.errors.report(component, "malformed", f"{path}: {text[:80]!r} is not an integer", str(path))
            return None


def entries(directory: Path, pattern: str = "*") -> list[Path]:
    """Sorted entries of a directory; [] when it does not exist or cannot be listed."""
    try:
        return sorted(directory.glob(pattern))
    except OSError:
        return []


def resolved(path: Path) -> Path | None:
    try:
        return path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None


class HostCollector:
    """Base of the real-host collectors: `rows` wraps `_collect` so that nothing it does can raise."""

    name = "host"

    def __init__(self, node: str, root: str | Path = "/") -> None:
        self.node = node
        self.root = Path(root)
        self.errors = ErrorLog(self.name)
        self.files = Files(self.errors)

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        self.errors.begin(now_ts_s)
        out: dict[str, RowBatch] = {}
        try:
            out = self._collect(now_ts_s)
        except Exception as exc:  # the contract: a collector records, never raises
            self.errors.report(self.node, "internal", f"{type(exc).__name__}: {exc}")
        errors = self.errors.end()
        if errors:
            out["collector_errors"] = RowBatch(ERROR_COLUMNS, errors)
        return out

    def _collect(self, now_ts_s: float) -> dict[str, RowBatch]:
        raise NotImplementedError


class Unavailable:
    """Stands in for a collector whose source this host does not have: one `unavailable` row, then nothing."""

    def __init__(self, name: str, component: str | None, detail: str) -> None:
        self.name = name
        self.detail = detail
        self.errors = ErrorLog(name)
        self._component = component

    def collect(self, now_ts_s: float) -> dict[str, pa.Table]:
        return to_arrow(self.rows(now_ts_s))

    def rows(self, now_ts_s: float) -> dict[str, RowBatch]:
        self.errors.begin(now_ts_s)
        self.errors.once(self._component, "unavailable", self.detail)
        rows = self.errors.end()
        return {"collector_errors": RowBatch(ERROR_COLUMNS, rows)} if rows else {}
