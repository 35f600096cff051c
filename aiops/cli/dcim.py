"""`aiops dcim cap|clear|watch|status`: facility power signals in, power limits out (docs/POWER.md).

A signal is stored in `dcim_signals`, then one response round runs (`aiops.control.dcim`): the response policy's
automatic rules act when people approved the file's exact bytes, inside its envelopes; everything else becomes
a proposal (`aiops actions list`). `watch` polls a JSON/YAML file of signals and runs a round every interval.

Actuator (`--actuator`): `twin` drives the simulated world saved beside the database (`<db>.twin.pkl`, the one
`aiops chat` acts on; `--scenario` creates it), `none` only proposes; `auto` picks `twin` when there is one.
`nvml` sets this host's GPUs (`--node nodeN`) through nvidia-ml-py with `guardrails.actuators_nvml.NvmlPowerActuator`.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aiops.cli.actions import DEFAULT_DB, open_store
from aiops.control.dcim import RoundReport, Sources, run_round
from aiops.control.power_inputs import (
    DcimSignal,
    DcimSignalError,
    check_budget_kw,
    check_scope,
    gpu_power_from_store,
    gpu_power_from_world,
    gpu_states_from_world,
    job_priorities_from_store,
    load_dcim_file,
    non_gpu_power_w,
    racks_in_store,
    record_signal,
    signals_in_force,
)
from aiops.errors import AiopsError, PrerequisiteError
from aiops.store import Store
from guardrails.actuators import Actuator, SimActuator
from guardrails.context import context_from_store, topology_from_store
from guardrails.policy import Context
from guardrails.responses import DEFAULT_RESPONSES_PATH, LoadedPolicy, load_response_policy


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("dcim", help="facility power signals (DCIM caps) and the automatic power response")
    verbs = p.add_subparsers(dest="dcim_command", metavar="VERB", required=True)
    cap = verbs.add_parser("cap", help="a rack or the fleet must stay under KW kilowatts")
    clear = verbs.add_parser("clear", help="the facility lifted its cap on a rack or the fleet")
    watch = verbs.add_parser("watch", help="poll a JSON/YAML file of DCIM signals and respond each interval")
    status = verbs.add_parser("status", help="signals in force and whether the response policy is approved")
    for verb in (cap, clear):
        where = verb.add_mutually_exclusive_group(required=True)
        where.add_argument("--rack", help="rack name (rack0, rack1, ...)")
        where.add_argument("--fleet", action="store_true", help="the whole fleet")
    cap.add_argument(
        "--kw", type=float, required=True, help="the scope's total power budget (GPUs and hosts)"
    )
    watch.add_argument(
        "--file", required=True, help='signals, e.g. {"rack1": {"kw": 18}, "fleet": {"clear": true}}'
    )
    watch.add_argument("--interval-s", type=float, default=5.0)
    watch.add_argument("--once", action="store_true", help="one round, then exit")
    watch.add_argument("--max-rounds", type=int, default=0, help="stop after N rounds (0: until Ctrl-C)")
    for verb in (cap, clear, watch, status):
        verb.add_argument("--db", default=DEFAULT_DB)
        verb.add_argument("--policy", default=str(DEFAULT_RESPONSES_PATH), help="response policy YAML")
        verb.add_argument("--json", action="store_true")
    for verb in (cap, clear, watch):
        verb.add_argument(
            "--actuator",
            choices=("auto", "twin", "nvml", "none"),
            default="auto",
            help="twin: the simulated world; nvml: this host's GPUs (with --node)",
        )
        verb.add_argument("--node", default=None, help="with --actuator nvml: this host's name (node{n})")
        verb.add_argument("--scenario", help="scenario YAML: creates the twin when none is saved beside --db")
    cap.set_defaults(func=run_cap)
    clear.set_defaults(func=run_clear)
    watch.set_defaults(func=run_watch)
    status.set_defaults(func=run_status)


# -- the world the round acts on --------------------------------------------------------------------------
def twin_path(db: str) -> Path:
    path = Path(db)
    return path.with_name(path.name + ".twin.pkl")  # aiops.agent.session.sidecar(db, ".twin.pkl")


def _load_world(db: str, scenario: str | None) -> Any | None:
    path = twin_path(db)
    if path.exists():
        with path.open("rb") as fh:
            return pickle.load(fh)  # our own file (aiops chat / aiops dcim wrote it)
    if scenario is None:
        return None
    from aiops.scenarios import load_scenario
    from aiops.sim import World

    spec = load_scenario(scenario)
    world = World(spec)
    for _ in range(round(spec.duration_s)):
        world.step(1.0)
    return world


def _save_world(db: str, world: Any) -> None:
    path = twin_path(db)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".twin-")
    with os.fdopen(fd, "wb") as fh:
        pickle.dump(world, fh)
    os.replace(tmp, path)  # atomic, as aiops.agent.twin.Twin.save


@dataclass
class Attached:
    sources: Sources
    actuator: Actuator | None
    describe: str
    done: Callable[[], None]


def _attach(store: Store, args: argparse.Namespace) -> Attached:
    """Readings, validation context and actuator: the twin when there is one (or --actuator twin), else
    the store's newest samples and no actuator. The seam for a real NVML backend."""
    telemetry_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples") or time.time())
    priorities = job_priorities_from_store(store)
    non_gpu = lambda scope: non_gpu_power_w(store, telemetry_ts_s, scope)  # noqa: E731
    world = _load_world(args.db, args.scenario) if args.actuator in ("auto", "twin") else None
    if args.actuator == "twin" and world is None:
        raise AiopsError(
            f"no twin beside {args.db} ({twin_path(args.db)}); pass --scenario FILE to create one"
        )
    if args.actuator == "nvml":
        return _attach_nvml(store, args, priorities, non_gpu, telemetry_ts_s)
    if world is not None:
        topology = topology_from_store(store)

        def twin_context(now_ts_s: float) -> Context:
            return Context(topology, gpu_states_from_world(world), (), now_ts_s)

        sources = Sources(lambda scope: gpu_power_from_world(world, scope), non_gpu, twin_context, priorities)
        return Attached(sources, SimActuator(world, topology), "twin (simulated world)",
                        lambda: _save_world(args.db, world))  # fmt: skip
    sources = Sources(lambda scope: gpu_power_from_store(store, telemetry_ts_s, scope), non_gpu,
                      lambda now_ts_s: context_from_store(store, now_ts_s), priorities)  # fmt: skip
    return Attached(sources, None, "none (proposals only)", lambda: None)


def _attach_nvml(
    store: Store, args: argparse.Namespace, priorities: dict[str, int], non_gpu: Any, telemetry_ts_s: float
) -> Attached:
    """This host's GPUs through the real NVML (nvidia-ml-py), same actuator code as the twin's power path:
    constraints checked, every limit read back, rolled back on mismatch. Other nodes' GPUs are refused."""
    from guardrails.actuators_nvml import NvmlPowerActuator

    node = args.node or ""
    topology = topology_from_store(store)
    if not node.startswith("node") or topology.expand(node) is None:
        raise AiopsError(f"--actuator nvml needs --node: this host's name in {args.db} (node0, node1, ...)")
    local = int(node.removeprefix("node"))
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise PrerequisiteError(f"--actuator nvml: NVML is not usable on this host ({exc})") from None

    def nvml_for(index: int) -> Any:
        if index != local:
            raise AiopsError(f"node{index} is not this host ({node}): its GPUs are set by its own agent")
        return pynvml

    sources = Sources(lambda scope: gpu_power_from_store(store, telemetry_ts_s, scope), non_gpu,
                      lambda now_ts_s: context_from_store(store, now_ts_s), priorities)  # fmt: skip
    actuator = NvmlPowerActuator(nvml_for, topology, initialise=False)
    return Attached(sources, actuator, f"nvml ({node}, nvidia-ml-py)", lambda: None)


@contextmanager
def _session(args: argparse.Namespace) -> Iterator[tuple[Store, LoadedPolicy, Attached]]:
    loaded = load_response_policy(args.policy)
    with open_store(args.db, read_only=False) as store:
        attached = _attach(store, args)
        try:
            yield store, loaded, attached
        finally:  # what was actuated stays actuated (Ctrl-C mid-round too): save the twin
            attached.done()


def _round(store: Store, loaded: LoadedPolicy, attached: Attached) -> RoundReport:
    report = run_round(store, loaded, attached.sources, attached.actuator, time.time())
    report.notes.insert(0, f"actuator: {attached.describe}")
    return report


# -- output ---------------------------------------------------------------------------------------------
def show_report(console: Console, report: RoundReport) -> None:
    policy = report.policy
    if policy["approved"]:
        console.print(f"policy {escape(policy['path'])} [green]approved[/] ({escape(policy['message'])})")
    else:
        console.print(f"policy {escape(policy['path'])} [yellow]not approved[/]: {escape(policy['message'])}")
        console.print("  nothing runs automatically: every response below waits for a person")
    for s in report.scopes:
        if s.kind == "cap":
            fit = "feasible" if s.feasible else f"[red]infeasible[/], short {s.shortfall_w:.0f} W"
            console.print(f"{s.scope}: cap {s.budget_kw:g} kW -> GPU budget {(s.gpu_budget_w or 0) / 1000:.2f} kW "
                          f"(non-GPU {s.non_gpu_w / 1000:.2f} kW); limits {s.current_total_w / 1000:.2f} kW -> "
                          f"target {s.target_total_w / 1000:.2f} kW; {fit} (stage {s.stage})")  # fmt: skip
        else:
            console.print(f"{s.scope}: cap cleared; {s.notes[0] if s.notes else ''}")
        for note in s.notes if s.kind == "cap" else ():
            console.print(f"  [dim]{escape(note)}[/]")
    if report.actions:
        table = Table("id", "rule", "target", "change", "mode", "status", "why")
        for a in report.actions:
            change = json.dumps(a.parameters, sort_keys=True)
            style = {"executed": "green", "pending": "yellow"}.get(a.status, "red")
            why = a.message.split(";")[0][:80]  # the whole message: --json, aiops actions show ID
            table.add_row(escape(a.proposal_id), a.rule_id, escape(a.target), escape(change), a.mode,
                          f"[{style}]{a.status}[/]", escape(why))  # fmt: skip
        console.print(table)
    else:
        console.print("no action needed this round")
    for note in report.notes:
        console.print(f"[dim]{escape(note)}[/]")
    if report.count("pending"):
        console.print(
            f"{report.count('pending')} proposal(s) wait for a person: aiops actions list --status pending"
        )


def _emit(args: argparse.Namespace, report: RoundReport) -> None:
    if args.json:
        print(json.dumps(report.to_json(), default=str))
    else:
        show_report(Console(highlight=False), report)


# -- verbs ----------------------------------------------------------------------------------------------
def _scope(store: Store, args: argparse.Namespace) -> str:
    scope = "fleet" if args.fleet else str(args.rack)
    return check_scope(scope, racks_in_store(store), "--rack" if args.rack else "--fleet", "scope")


def run_cap(args: argparse.Namespace) -> int:
    budget_kw = check_budget_kw(args.kw, "--kw", "kw")
    with _session(args) as (store, loaded, attached):
        record_signal(store, DcimSignal(_scope(store, args), "cap", budget_kw, time.time(), "cli"))
        report = _round(store, loaded, attached)
    _emit(args, report)
    return 0


def run_clear(args: argparse.Namespace) -> int:
    with _session(args) as (store, loaded, attached):
        record_signal(store, DcimSignal(_scope(store, args), "clear", None, time.time(), "cli"))
        report = _round(store, loaded, attached)
    _emit(args, report)
    return 0


def _record_file_signals(store: Store, path: str, now_ts_s: float) -> list[str]:
    """Store what changed in the file: new or different signals, and clears for scopes the file capped
    before and no longer lists. Returns one line per change."""
    source = f"file:{path}"
    listed = load_dcim_file(path, now_ts_s, racks_in_store(store))
    in_force = signals_in_force(store)
    changes: list[str] = []
    for signal in listed:
        signal = DcimSignal(signal.scope, signal.kind, signal.budget_kw, now_ts_s, source)
        if not signal.same_as(in_force.get(signal.scope)):
            record_signal(store, signal)
            changes.append(
                f"{signal.scope}: {signal.kind}" + (f" {signal.budget_kw:g} kW" if signal.budget_kw else "")
            )
    named = {s.scope for s in listed}
    for scope, old in in_force.items():
        if old.source == source and old.kind == "cap" and scope not in named:
            record_signal(store, DcimSignal(scope, "clear", None, now_ts_s, source))
            changes.append(f"{scope}: clear (no longer in the file)")
    return changes


def run_watch(args: argparse.Namespace) -> int:
    console = Console(highlight=False, stderr=args.json)
    load_response_policy(args.policy)  # a bad policy file stops here, before the loop
    rounds = 0
    console.print(f"watching {escape(args.file)} every {args.interval_s:g} s (Ctrl-C stops)")
    try:
        while True:
            try:
                with _session(args) as (store, loaded, attached):
                    changes = _record_file_signals(store, args.file, time.time())
                    report = _round(store, loaded, attached)
            except DcimSignalError as exc:
                if rounds == 0 or args.once:
                    raise
                console.print(
                    f"[red]{escape(str(exc))}[/]; the signals in force stay, retrying"
                )  # mid-write?
            else:
                stamp = time.strftime("%H:%M:%S")
                what = "; ".join(changes) if changes else "no new signal"
                console.print(f"{stamp} round {rounds + 1}: {escape(what)}; {report.count('executed')} executed, "
                              f"{report.count('pending')} pending, {report.count('denied')} denied")  # fmt: skip
                if args.json:
                    print(json.dumps(report.to_json(), default=str), flush=True)
                elif report.actions or changes:
                    show_report(console, report)
            rounds += 1
            if args.once or (args.max_rounds and rounds >= args.max_rounds):
                return 0
            time.sleep(max(0.0, args.interval_s))
    except KeyboardInterrupt:
        console.print(f"stopped after {rounds} round(s)")
        return 0


def run_status(args: argparse.Namespace) -> int:
    from aiops.cli.policy import status_of

    loaded = load_response_policy(args.policy)
    state = status_of(loaded, args.db)
    with open_store(args.db, read_only=True) as store:
        signals = [s.__dict__ for s in signals_in_force(store).values()]
    if args.json:
        print(json.dumps({"signals": signals, "policy": {"path": loaded.path, "sha256": loaded.sha256,
                                                         **{k: v for k, v in state.items() if k != "events"}}}))  # fmt: skip
        return 0
    console = Console(highlight=False)
    for s in signals or [{"scope": "-", "kind": "no signal", "budget_kw": None, "source": ""}]:
        kw = f" {s['budget_kw']:g} kW" if s["budget_kw"] else ""
        console.print(f"{s['scope']}: {s['kind']}{kw} {escape(s['source'])}")
    console.print(f"policy {escape(loaded.path)} {loaded.sha256[:12]}: {escape(state['message'])}")
    return 0
