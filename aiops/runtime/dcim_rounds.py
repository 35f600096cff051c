"""DCIM rounds on a workspace, and the watch loop: the library behind `aiops dcim cap|clear|watch`.

Each round opens the workspace for one write transaction: record the signals, attach the world (the twin this
process holds, synced with what other processes did; or NVML; or none), run `aiops.control.dcim_response.run_round`,
close. Between rounds the workspace is free for every other process (chat, `aiops actions`, the service).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiops.control.dcim_response import RoundReport, run_round
from aiops.control.dcim_signals import (
    DcimSignal,
    check_scope,
    load_dcim_file,
    record_signal,
)
from aiops.control.dcim_source import record_changes
from aiops.errors import DcimSignalError
from aiops.runtime.world import attach
from aiops.sim.twin import Twin
from aiops.store import Store, Workspace
from aiops.store.power_readings import racks_in_store
from guardrails.responses import LoadedPolicy


@dataclass
class RoundSetup:
    """How rounds attach to the world; keeps the twin between rounds of one process."""

    actuator: str = "auto"
    node: str | None = None
    nvml: Any = None
    twin: Twin | None = None


@dataclass
class RoundResult:
    report: RoundReport
    changes: list[str] = field(default_factory=list)  # signals recorded this round, one line each


def one_round(
    workspace: Workspace,
    loaded: LoadedPolicy,
    setup: RoundSetup,
    *,
    signals: Callable[[Store, float], list[str]] | None = None,
    clock: Callable[[], float] = time.time,
) -> RoundResult:
    """Record new signals (`signals(store, now)` returns one line per change), then one response round."""
    with workspace.write() as store:
        now = clock()
        changes = signals(store, now) if signals is not None else []
        attached = attach(store, actuator=setup.actuator, node=setup.node, twin=setup.twin, nvml=setup.nvml)
        setup.twin = attached.twin
        report = run_round(store, loaded, attached.readings, attached.topology, attached.actuator, now)
        report.notes.insert(0, f"actuator: {attached.describe}")
        return RoundResult(report, changes)


def signal_now(signal: DcimSignal) -> Callable[[Store, float], list[str]]:
    """A signal from the command line, checked against the workspace's racks, stamped with the round's time."""

    def record(store: Store, now: float) -> list[str]:
        check_scope(
            signal.scope, racks_in_store(store), "--rack" if signal.scope != "fleet" else "--fleet", "scope"
        )
        record_signal(store, DcimSignal(signal.scope, signal.kind, signal.budget_kw, now, signal.source))
        return [f"{signal.scope}: {signal.kind}" + (f" {signal.budget_kw:g} kW" if signal.budget_kw else "")]

    return record


def file_signals(path: str) -> Callable[[Store, float], list[str]]:
    """What changed in a signals file: new or different signals, and clears for scopes the file capped before
    and no longer lists."""

    def record(store: Store, now: float) -> list[str]:
        return record_changes(store, load_dcim_file(path, now, racks_in_store(store)), now, f"file:{path}")

    return record


def watch(
    workspace: Workspace,
    loaded: LoadedPolicy,
    path: str,
    setup: RoundSetup,
    *,
    interval_s: float,
    max_rounds: int = 0,
    on_round: Callable[[int, RoundResult], None] = lambda n, r: None,
    on_error: Callable[[int, Exception], None] = lambda n, e: None,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.time,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Poll the signals file and run a round every `interval_s` until `max_rounds` (0: until `stop()`).
    A file that does not validate mid-run (being written?) keeps the signals in force and is retried; at the
    first round it is an error. Returns the rounds run."""
    rounds = 0
    while not stop():
        try:
            result = one_round(workspace, loaded, setup, signals=file_signals(path), clock=clock)
        except DcimSignalError as exc:
            if rounds == 0:
                raise
            on_error(rounds, exc)
        else:
            on_round(rounds + 1, result)
        rounds += 1
        if max_rounds and rounds >= max_rounds:
            return rounds
        sleep(max(0.0, interval_s))
    return rounds
