"""`aiops lab net`: the network lab (namespaces, a 200 Mbit/s bottleneck, VIP vs bulk, three phases)."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from aiops.cli.args import positive_float, seconds
from aiops.lab.netlab import LabConfig, print_progress, run_lab
from aiops.text import terminal


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    lab = sub.add_parser("lab", help="self-contained labs that need root")
    kinds = lab.add_subparsers(dest="lab_command", metavar="LAB", required=True)
    net = kinds.add_parser("net", help="VIP latency and bulk throughput: alone, no lanes, lanes")
    net.add_argument("--json", action="store_true")
    net.add_argument(
        "--phase-s", type=seconds(max_s=3600.0), default=8.0, help="seconds of VIP traffic per phase"
    )
    net.add_argument("--bottleneck-mbps", type=positive_float(100_000.0), default=200.0)
    net.set_defaults(func=run_net)


def run_net(args: argparse.Namespace) -> int:
    result = run_lab(LabConfig(bottleneck_mbps=args.bottleneck_mbps, phase_s=args.phase_s), print_progress)
    if args.json:
        print(json.dumps(result))
        return 0
    table = Table(title=f"network lab, bottleneck {result['bottleneck_mbps']:g} Mbit/s")
    for column in ("phase", "VIP p50 ms", "VIP p99 ms", "VIP Mbit/s", "bulk Mbit/s"):
        table.add_column(column)
    for name, phase in result["phases"].items():
        table.add_row(
            name, *(f"{phase[k]:.2f}" for k in ("vip_p50_ms", "vip_p99_ms", "vip_mbps", "bulk_mbps"))
        )
    terminal().print(table)
    return 0
