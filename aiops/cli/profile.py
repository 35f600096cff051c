"""`aiops profile --pid PID [--duration-s 30] --out DIR`: AI flame graphs of one process (aiops/profile)."""

from __future__ import annotations

import argparse
import math
import signal
import socket
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from aiops.cli.configured import cli_config, configured_workspace
from aiops.errors import InputError, PrerequisiteError
from aiops.profile.duty import DEFAULT_DUTY, DEFAULT_PERIOD_S
from aiops.profile.gpu import IDLE_BELOW_PCT, NvmlUtilSource, UtilSource
from aiops.profile.outputs import summary, write_outputs
from aiops.profile.probes import require_privilege, require_target
from aiops.profile.session import DEFAULT_SLICE_S, run_profile
from aiops.profile.store_rows import record_profile
from aiops.store.writable import prepare_folder, writing
from aiops.text import terminal

MAX_DURATION_S = 24 * 3600.0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("profile", help="AI flame graph of a CUDA process (eBPF uprobes + GPU idle join)")
    parser.add_argument("--pid", type=int, required=True, help="the process to profile")
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument(
        "--out", required=True, help="directory for the folded stacks, SVG and speedscope JSON"
    )
    parser.add_argument("--slice-s", type=float, default=DEFAULT_SLICE_S, help="GPU join granularity")
    parser.add_argument("--idle-below-pct", type=float, default=IDLE_BELOW_PCT)
    parser.add_argument(
        "--probe-duty",
        type=float,
        default=DEFAULT_DUTY,
        help="share of each period with the CUDA probes attached; counts are scaled by it (1: every call, "
        "the highest overhead; docs/PROFILE.md)",
    )
    parser.add_argument(
        "--probe-period-s", type=float, default=DEFAULT_PERIOD_S, help="duty cycle period (seconds)"
    )
    parser.add_argument("--no-nvml", action="store_true", help="do not read GPU utilisation")
    parser.add_argument("--db", default=None, help="also store the summary (top stacks) in this workspace")
    parser.add_argument("--node", default=socket.gethostname(), help="node name for the stored summary")
    parser.set_defaults(func=run)


def _positive(value: float, field: str, upper: float) -> float:
    if not math.isfinite(value) or value <= 0 or value > upper:
        raise InputError(
            "<command line>", field, f"must be a number of seconds above 0, got {value}", f"(0, {upper:g}]"
        )
    return value


FIX_OUT = "give --out a folder this user can write"


def _nvml_source(pid: int) -> UtilSource | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no library: the idle view stays empty (said in summary)
        return None
    return NvmlUtilSource(pynvml, pid)


def run(args: argparse.Namespace) -> int:
    duration_s = _positive(args.duration_s, "--duration-s", MAX_DURATION_S)
    slice_s = _positive(args.slice_s, "--slice-s", 60.0)
    period_s = _positive(args.probe_period_s, "--probe-period-s", MAX_DURATION_S)
    if not (math.isfinite(args.probe_duty) and 0 < args.probe_duty <= 1):
        raise InputError("<command line>", "--probe-duty", f"got {args.probe_duty}", "(0, 1]")
    if not 0 <= args.idle_below_pct <= 100:
        raise InputError("<command line>", "--idle-below-pct", f"got {args.idle_below_pct}", "0-100")
    out_dir = Path(args.out)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(str(out_dir), "--out", "exists and is not a directory")
    prepare_folder(out_dir, "the profile (--out)", FIX_OUT)  # before minutes of probing, not after
    require_target(args.pid)  # before compiling: a gone PID or a process without CUDA fails fast
    require_privilege()
    util = None if args.no_nvml else _nvml_source(args.pid)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: dict[int, Any] = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

    def on_attached(probes: tuple[str, ...]) -> None:
        print(f"attached to pid {args.pid}: {', '.join(probes)}", flush=True)

    try:
        result = run_profile(
            args.pid,
            duration_s,
            slice_s=slice_s,
            util=util,
            stop=stop,
            on_attached=on_attached,
            duty=args.probe_duty,
            period_s=period_s,
        )
    except OSError as exc:
        raise PrerequisiteError(f"attaching probes failed: {exc}") from exc
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    with writing(out_dir, "the profile (--out)", FIX_OUT):
        written = write_outputs(result, out_dir)
    run_id = None
    if args.db is not None:
        with configured_workspace(args.db, cli_config(args)).write() as store:
            run_id = record_profile(store, result, args.node)
    facts = summary(result)
    console = terminal()
    console.print(
        f"profiled pid {result.pid} for {result.duration_s:.1f} s; probes: {', '.join(result.probes)}; "
        f"GPU: {'no utilisation source' if util is None else f'{result.idle_slices} idle slices'}",
        markup=False,
        highlight=False,
    )
    sampling = facts["sampling"]
    if sampling["duty"] < 1:
        console.print(
            f"  probes counted {sampling['probe_fraction']:.1%} of the run ({sampling['windows']} windows, one "
            f"per {sampling['period_s']:g} s period): calls and blocked time scaled by "
            f"{1 / max(sampling['probe_fraction'], 1e-9):.1f} (--probe-duty 1 counts every call)",
            markup=False,
            highlight=False,
        )
    for view, total in facts["totals"].items():
        console.print(f"  {view}: {total['value']} {total['unit']}", markup=False, highlight=False)
    for name, path in written.items():
        console.print(f"  wrote {name}: {path}", markup=False, highlight=False)
    if run_id is not None:
        console.print(
            f"  stored run {run_id} in {args.db} (probe_duty {result.probe_fraction:.4f}"
            f"{', counts scaled' if result.probe_fraction < 1 else ''})",
            markup=False,
            highlight=False,
        )
    return 0
