"""Sysfs actuators, rooted at a path (default "/sys") so tests point them at fixture trees, as the sysfs
collectors do. Every write is planned first (read-only: bounds, readable files), then written, re-read, and on
any failure or mismatch every file already written by the call is restored to its previous value.

- powercap (Documentation/power/powercap/powercap.rst): `class/powercap/<zone>/constraint_<N>_power_limit_uw`
  in µW, bounded by `constraint_<N>_max_power_uw` and `constraint_<N>_min_power_uw` when the zone has them
  (intel-rapl: constraint 0 is long_term, 1 short_term). A typed API only (`PowercapActuator.set_limit_w`):
  no registry kind drives it yet.
- thermal cooling devices (Documentation/driver-api/thermal/sysfs-api.rst):
  `class/thermal/cooling_device*/{type,cur_state,max_state}`; `CoolingActuator` implements the `Actuator`
  protocol for `set_cooling_state` (node or rack targets): cur_state = cooling_fraction × max_state, rounded
  half up (more cooling on a tie), for every cooling device of the selected types. Default: every type except
  those that cool by slowing compute (`Processor` = ACPI processor throttling, `intel_powerclamp` = idle
  injection, `*cpufreq*`/`*devfreq*`/`thermal-idle*`), since "more cooling" there throttles the workload.
  The kernel refuses cur_state > max_state with EINVAL (drivers/thermal/thermal_sysfs.c, cur_state_store);
  we refuse it before writing. A device bound to a thermal zone whose governor is not `user_space` may be
  moved again by the kernel at the zone's next poll: the read-back proves the write, not that it stays.

Writes open the file O_WRONLY|O_TRUNC without O_CREAT: a missing attribute is an error, never a new file.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.errors import SysfsError
from guardrails.actions import Action
from guardrails.actuators import ActuationResult
from guardrails.topology import Topology

COMPUTE_THROTTLING_TYPES = ("Processor", "intel_powerclamp")
COMPUTE_THROTTLING_MARKERS = ("cpufreq", "devfreq", "thermal-idle")
_MAX_ATTR_BYTES = 4096  # a sysfs attribute is at most one page (Documentation/filesystems/sysfs.rst)


class SysfsFiles:
    """The I/O seam (one read, one write), as httpx's transports: tests may substitute a failing writer."""

    def read_text(self, path: Path) -> str:
        try:
            with path.open("rb") as f:
                return f.read(_MAX_ATTR_BYTES).decode("utf-8").strip()
        except FileNotFoundError as exc:
            raise SysfsError(path, "missing") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise SysfsError(path, f"unreadable ({type(exc).__name__}: {exc})") from exc

    def write_text(self, path: Path, text: str) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
        except FileNotFoundError as exc:
            raise SysfsError(path, "missing (nothing written)") from exc
        except OSError as exc:
            raise SysfsError(path, f"not writable ({type(exc).__name__}: {exc})") from exc
        try:
            os.write(fd, text.encode("ascii"))
        except OSError as exc:  # sysfs answers a refused value (EINVAL, EPERM) at write time
            raise SysfsError(path, f"write of {text!r} refused ({type(exc).__name__}: {exc})") from exc
        finally:
            os.close(fd)

    def read_int(self, path: Path) -> int:
        text = self.read_text(path)
        try:
            return int(text)
        except ValueError as exc:
            raise SysfsError(path, f"not an integer: {text[:40]!r}") from exc


@dataclass(frozen=True)
class _Write:
    key: str  # what results name it by: "intel-rapl:0" or "node3/cooling_device2"
    path: Path
    previous: int
    value: int


def _transaction(files: SysfsFiles, writes: list[_Write]) -> tuple[dict[str, int], str, dict[str, Any]]:
    """Write each value and re-read it; on the first failure restore every file already written (each
    restore re-read as well). Returns (observed values, error or "", rollback detail)."""
    observed: dict[str, int] = {}
    touched: list[_Write] = []
    for write in writes:
        touched.append(write)
        try:
            files.write_text(write.path, str(write.value))
            got = files.read_int(write.path)
        except SysfsError as exc:
            error = str(exc)
            if _unchanged(files, write):  # the failed write did not land: nothing to restore there
                touched.pop()
        else:
            if got == write.value:
                observed[write.key] = got
                continue
            error = f"{write.path}: wrote {write.value} but it reads back {got}"
        restored, failures = _restore(files, touched)
        detail = {"failed": write.key, "restored": restored, "rollback_errors": failures}
        message = f"{error}; restored {len(restored)} file(s) to their previous value"
        if failures:
            message += "; ROLLBACK FAILED: " + "; ".join(failures)
        return observed, message, detail
    return observed, "", {}


def _unchanged(files: SysfsFiles, write: _Write) -> bool:
    try:
        return files.read_int(write.path) == write.previous
    except SysfsError:
        return False


def _restore(files: SysfsFiles, writes: Iterable[_Write]) -> tuple[list[str], list[str]]:
    restored, failures = [], []
    for write in writes:
        try:
            files.write_text(write.path, str(write.previous))
            got = files.read_int(write.path)
        except SysfsError as exc:
            failures.append(str(exc))
            continue
        if got == write.previous:
            restored.append(write.key)
        else:
            failures.append(f"{write.path}: restored {write.previous} but it reads back {got}")
    return restored, failures


# -- powercap -----------------------------------------------------------------------------------------------
class PowercapActuator:
    """Power limits of powercap zones (RAPL package/DRAM domains and the like), in µW on disk, W in the API."""

    def __init__(self, root: str | Path = "/sys", files: SysfsFiles | None = None) -> None:
        self.root = Path(root)
        self.files = files or SysfsFiles()

    def zone_dir(self, zone: str) -> Path:
        if not zone or "/" in zone or zone in (".", ".."):
            raise SysfsError(self.root / "class/powercap", f"invalid zone name {zone!r}")
        return self.root / "class" / "powercap" / zone

    def zones(self) -> list[str]:
        base = self.root / "class" / "powercap"
        try:
            return sorted(p.name for p in base.iterdir() if (p / "constraint_0_power_limit_uw").exists())
        except OSError:
            return []

    def _optional(self, path: Path) -> int | None:
        return self.files.read_int(path) if path.exists() else None

    def bounds_uw(self, zone: str, constraint: int = 0) -> tuple[int, int | None]:
        """[min, max] µW: `constraint_N_min_power_uw` (else 0) and `constraint_N_max_power_uw` (else None)."""
        base = self.zone_dir(zone)
        low = self._optional(base / f"constraint_{constraint}_min_power_uw")
        high = self._optional(base / f"constraint_{constraint}_max_power_uw")
        return (low or 0), high

    def read_limit_w(self, zone: str, constraint: int = 0) -> float:
        return self.files.read_int(self.zone_dir(zone) / f"constraint_{constraint}_power_limit_uw") / 1e6

    def set_limit_w(
        self, zone: str, watts: float, dry_run: bool = False, constraint: int = 0
    ) -> ActuationResult:
        """Plan, write, re-read; `previous`/`expected` are {"power_limit_uw": {zone: µW}}."""
        try:
            path = self.zone_dir(zone) / f"constraint_{constraint}_power_limit_uw"
            previous = self.files.read_int(path)
            low, high = self.bounds_uw(zone, constraint)
        except SysfsError as exc:
            return ActuationResult(False, {"dry_run": dry_run}, error=f"{exc}; nothing changed")
        value = round(watts * 1e6) if math.isfinite(watts) else -1
        if value < low or (high is not None and value > high):
            allowed = f"[{low / 1e6:g}, {'-' if high is None else f'{high / 1e6:g}'}] W"
            return ActuationResult(
                False,
                {"dry_run": dry_run},
                error=(
                    f"{path}: {watts:g} W outside the allowed range {allowed} "
                    f"(constraint_{constraint}_min/max_power_uw); nothing changed"
                ),
            )
        before = {"power_limit_uw": {zone: previous}}
        if dry_run:
            detail = {"power_limit_uw": {zone: value}, "changes": int(value != previous), "dry_run": True}
            return ActuationResult(True, detail, before, {"power_limit_uw": {zone: value}})
        observed, error, undo = _transaction(self.files, [_Write(zone, path, previous, value)])
        if error:
            return ActuationResult(False, {**undo, "dry_run": False}, before, error=error)
        return ActuationResult(
            True, {"power_limit_uw": observed, "dry_run": False}, before, {"power_limit_uw": observed}
        )

    def restore(self, previous: dict[str, Any], constraint: int = 0) -> ActuationResult:
        """Write back `previous["power_limit_uw"]` (what `set_limit_w` returned as `previous`)."""
        writes = []
        for zone, uw in previous.get("power_limit_uw", {}).items():
            path = self.zone_dir(zone) / f"constraint_{constraint}_power_limit_uw"
            writes.append(_Write(zone, path, int(uw), int(uw)))
        restored, failures = _restore(self.files, writes)
        if failures:
            return ActuationResult(
                False, {"restored": restored}, error="rollback failed: " + "; ".join(failures)
            )
        return ActuationResult(True, {"restored": restored})


# -- thermal cooling devices --------------------------------------------------------------------------------
def is_compute_throttling(device_type: str) -> bool:
    lowered = device_type.lower()
    return device_type in COMPUTE_THROTTLING_TYPES or any(m in lowered for m in COMPUTE_THROTTLING_MARKERS)


@dataclass(frozen=True)
class CoolingDevice:
    key: str  # node/cooling_deviceN
    path: Path  # the cooling_deviceN directory
    type: str
    cur_state: int
    max_state: int


class CoolingActuator:
    """`set_cooling_state` on nodes whose sysfs root is in `roots` (node name -> root; on one host:
    `{"node3": "/sys"}`). Rack targets expand through `topology`. `types`: only devices of these types
    (exact `type` text); None: every type that does not throttle compute (`is_compute_throttling`)."""

    KINDS = ("set_cooling_state",)

    def __init__(
        self,
        roots: Mapping[str, str | Path],
        topology: Topology | None = None,
        *,
        types: Iterable[str] | None = None,
        files: SysfsFiles | None = None,
    ) -> None:
        self.roots = {node: Path(root) for node, root in roots.items()}
        self.topology = topology
        self.types = None if types is None else frozenset(types)
        self.files = files or SysfsFiles()

    def _selected(self, device_type: str) -> bool:
        return device_type in self.types if self.types is not None else not is_compute_throttling(device_type)

    def nodes(self, target: str) -> list[str]:
        scope = self.topology.expand(target) if self.topology is not None else None
        if scope is not None:
            return list(scope.nodes)
        return [target] if target in self.roots else []

    def devices(self, node: str) -> list[CoolingDevice]:
        """The selected cooling devices of a node (raises SysfsError naming a file it cannot read)."""
        if node not in self.roots:
            raise SysfsError(Path("<none>"), f"no sysfs root configured for {node}")
        base = self.roots[node] / "class" / "thermal"
        out = []
        for path in sorted(base.glob("cooling_device*"), key=lambda p: (len(p.name), p.name)):
            device_type = self.files.read_text(path / "type")
            if self._selected(device_type):
                cur = self.files.read_int(path / "cur_state")
                top = self.files.read_int(path / "max_state")
                out.append(CoolingDevice(f"{node}/{path.name}", path, device_type, cur, top))
        return out

    def _plan(self, action: Action) -> tuple[list[_Write], dict[str, int], str]:
        fraction = action.parameters.get("cooling_fraction")
        if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not math.isfinite(fraction):
            return [], {}, f"cooling_fraction must be a finite number, got {fraction!r}"
        nodes = self.nodes(action.target)
        if not nodes:
            return [], {}, f"no node with a sysfs root in {action.target}"
        writes: list[_Write] = []
        maxima: dict[str, int] = {}
        for node in nodes:
            try:
                devices = self.devices(node)
            except SysfsError as exc:
                return [], {}, f"{exc}; nothing changed"
            if not devices:
                wanted = sorted(self.types) if self.types is not None else "any non-throttling type"
                return (
                    [],
                    {},
                    f"{node}: no cooling devices of {wanted} under {self.roots[node]}/class/thermal",
                )
            for device in devices:
                state = math.floor(round(float(fraction) * device.max_state, 9) + 0.5)
                if not 0 <= state <= device.max_state:
                    return (
                        [],
                        {},
                        (
                            f"{device.path / 'cur_state'}: state {state} (cooling_fraction {fraction:g}) outside "
                            f"[0, {device.max_state}] (max_state); nothing changed"
                        ),
                    )
                writes.append(_Write(device.key, device.path / "cur_state", device.cur_state, state))
                maxima[device.key] = device.max_state
        return writes, maxima, ""

    def _path(self, key: str) -> Path | None:
        node, _, device = key.partition("/")
        root = self.roots.get(node)
        if root is None or not device.startswith("cooling_device") or "/" in device:
            return None
        return root / "class" / "thermal" / device / "cur_state"

    # -- the Actuator protocol ------------------------------------------------------------------------------
    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        if action.kind not in self.KINDS:
            return ActuationResult(False, error=f"the cooling actuator has no action {action.kind}")
        writes, maxima, error = self._plan(action)
        if error:
            return ActuationResult(False, {"dry_run": dry_run}, error=error)
        previous = {"cooling_state": {w.key: w.previous for w in writes}}
        wanted = {w.key: w.value for w in writes}
        if dry_run:
            changes = sum(w.value != w.previous for w in writes)
            detail = {"cooling_state": wanted, "max_state": maxima, "changes": changes, "dry_run": True}
            return ActuationResult(True, detail, previous, {"cooling_state": wanted})
        observed, error, undo = _transaction(self.files, writes)
        if error:
            return ActuationResult(False, {**undo, "dry_run": False}, previous, error=error)
        detail = {"cooling_state": observed, "max_state": maxima, "dry_run": False}
        return ActuationResult(True, detail, previous, {"cooling_state": observed})

    def read_back(self, action: Action) -> dict[str, Any]:
        """{"cooling_state": {node/cooling_deviceN: state or None}}; None where the file cannot be read."""
        states: dict[str, int | None] = {}
        for node in self.nodes(action.target):
            try:
                devices = self.devices(node)
            except SysfsError:
                states[node] = None
                continue
            for device in devices:
                try:
                    states[device.key] = self.files.read_int(device.path / "cur_state")
                except SysfsError:
                    states[device.key] = None
        return {"cooling_state": states}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        writes, unknown = [], []
        for key, state in previous.get("cooling_state", {}).items():
            path = self._path(str(key))
            if path is None:
                unknown.append(f"{key}: not a cooling device of a configured node")
            else:
                writes.append(_Write(str(key), path, int(state), int(state)))
        restored, failures = _restore(self.files, writes)
        failures = unknown + failures
        if failures:
            return ActuationResult(
                False, {"restored": restored}, error="rollback failed: " + "; ".join(failures)
            )
        return ActuationResult(True, {"restored": restored})
