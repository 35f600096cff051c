"""The scheduler's own view of which nodes run no new work, for the circuit breaker (guardrails.breaker):
nodes people or other tools drained or cordoned count as much as the ones this product took out.

- Slurm: `sinfo -h -N -o %N|%T` (one line per node and partition; `%T` the long state: `idle`, `mixed`,
  `draining`, `drained`, `down*`, ...; sinfo(1) "NODE STATE CODES"), argument list, bounded time and output.
  The suffixes `*` (not responding), `~` (powered off), `#`, `!`, `%`, `$`, `@`, `^`, `-` are flags of the
  same state (sinfo(1)) and are stripped before the word is compared with `SLURM_OUT_STATES`; a state with
  flags joined by `+` (scontrol's `IDLE+DRAIN`) is out when any of its words is.
- Kubernetes: the official client's `list_node`: `spec.unschedulable` is a cordon (what `kubectl cordon`
  sets); such a node counts as `cordoned`.
`names` maps a scheduler's node name to the component name this workspace uses (a twin rig's `node0` is
Slurm's `aiops-xxxx`); an unmapped name stands for itself. Output is hostile text: only names a component
could have are kept.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiops.errors import SchedulerError
from guardrails.breaker import SLURM_OUT_STATES, SchedulerView

MAX_OUTPUT_BYTES = 4 * 1024 * 1024
MAX_NODES = 100_000
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$", re.ASCII)
_FLAGS = "*~#!%$@^-+"


def parse_sinfo(text: str, names: Mapping[str, str] | None = None) -> SchedulerView:
    """`sinfo -h -N -o %N|%T` output -> the view (a node listed under several partitions counts once)."""
    states: dict[str, str] = {}
    names = names or {}
    for line in text.splitlines()[:MAX_NODES]:
        node, sep, state = line.strip().partition("|")
        if not sep or not _NAME.match(node):
            continue
        word = "+".join(part.rstrip(_FLAGS) for part in state.strip().lower().split("+"))
        states[names.get(node, node)] = word or "unknown"
    out = frozenset(n for n, word in states.items() if SLURM_OUT_STATES & set(word.split("+")))
    return SchedulerView("slurm", states, out)


def slurm_view(
    binaries: str = "",
    *,
    timeout_s: float = 10.0,
    env: Mapping[str, str] | None = None,
    names: Mapping[str, str] | None = None,
) -> SchedulerView:
    """Ask `sinfo` now; raises `SchedulerError` when it cannot answer."""
    sinfo = str(Path(binaries) / "sinfo") if binaries else "sinfo"
    argv = [sinfo, "-h", "-N", "-o", "%N|%T"]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            timeout=timeout_s,
            env=None if env is None else dict(env),
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SchedulerError(f"sinfo: {type(exc).__name__}: {exc}") from exc
    if done.returncode != 0:
        said = done.stderr[:300].decode("utf-8", "replace").strip()
        raise SchedulerError(f"sinfo exited {done.returncode}: {said}")
    return parse_sinfo(done.stdout[:MAX_OUTPUT_BYTES].decode("utf-8", "replace"), names)


def kubernetes_view(
    api: Any, *, timeout_s: float = 10.0, names: Mapping[str, str] | None = None
) -> SchedulerView:
    """The cluster's nodes through a `CoreV1Api`; a cordoned node (`spec.unschedulable`) is out."""
    names = names or {}
    listed = api.list_node(_request_timeout=timeout_s)
    states: dict[str, str] = {}
    for node in list(listed.items or ())[:MAX_NODES]:
        name = str(getattr(node.metadata, "name", "") or "")
        if not _NAME.match(name):
            continue
        cordoned = bool(node.spec is not None and node.spec.unschedulable)
        states[names.get(name, name)] = "cordoned" if cordoned else "schedulable"
    out = frozenset(n for n, word in states.items() if word == "cordoned")
    return SchedulerView("kubernetes", states, out)


def view_reader(
    kind: str,
    *,
    binaries: str = "",
    timeout_s: float = 10.0,
    env: Mapping[str, str] | None = None,
    kube_api: Callable[[], Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> Callable[[], SchedulerView | None] | None:
    """A reader for `[scheduler] kind` (None for `none`): each call asks the scheduler again."""
    if kind == "slurm":
        return lambda: slurm_view(binaries, timeout_s=timeout_s, env=env, names=names)
    if kind == "kubernetes" and kube_api is not None:
        make = kube_api
        return lambda: kubernetes_view(make(), timeout_s=timeout_s, names=names)
    return None
