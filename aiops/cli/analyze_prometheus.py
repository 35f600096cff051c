"""`aiops analyze --prometheus URL [--since 2h | --start T --end T]`: dcgm-exporter and node_exporter series
read from Prometheus or VictoriaMetrics (aiops/sources) into a workspace (a temporary one unless `--db` names a
new file), then the same analysis as `aiops analyze --db`. See docs/PROMETHEUS.md."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from aiops.cli.durations import duration_s, timestamp_s
from aiops.cli.render import render, result_json
from aiops.config import load_config
from aiops.errors import InputError
from aiops.runtime.analysis import analyze
from aiops.sources.mapping import HostIdentity, bound_memory
from aiops.sources.prometheus import PrometheusClient, fetch_into
from aiops.store import Workspace
from aiops.text import markup, terminal


def register_options(a: argparse.ArgumentParser) -> None:
    a.add_argument(
        "--prometheus",
        metavar="URL",
        help="read dcgm-exporter/node_exporter series from this "
        "Prometheus or VictoriaMetrics instead of --db",
    )
    a.add_argument(
        "--since", default=None, help="with --prometheus: how far back from now (90s, 30m, 2h, 1d)"
    )
    a.add_argument("--start", default=None, help="with --prometheus: range start (RFC 3339 or Unix seconds)")
    a.add_argument("--end", default=None, help="with --prometheus: range end (default now)")
    a.add_argument(
        "--step", default=None, help="with --prometheus: query step (default: the scrape interval)"
    )
    a.add_argument("--selector", default="", help='with --prometheus: extra label matchers, e.g. job="dcgm"')
    a.add_argument("--bearer-token-file", default=None, help="with --prometheus: file holding a bearer token")
    a.add_argument(
        "--timeout-s",
        type=float,
        default=30.0,
        help="with --prometheus: the time one answer may take, whole (seconds)",
    )
    a.add_argument("--config", default=None, help="config whose [node.hosts] maps hostnames to nodes")


def time_range(args: argparse.Namespace, now_s: float) -> tuple[float, float]:
    if args.since and (args.start or args.end):
        raise InputError("--since", "since", "give --since or --start/--end, not both")
    end_s = timestamp_s(args.end, "--end") if args.end else now_s
    if args.start:
        start_s = timestamp_s(args.start, "--start")
    else:
        start_s = end_s - duration_s(args.since or "2h", "--since")
    if start_s >= end_s:
        raise InputError("--start", "start", "the range is empty: start is not before end")
    return start_s, end_s


def run_prometheus(args: argparse.Namespace) -> int:
    start_s, end_s = time_range(args, time.time())
    step_s = duration_s(args.step, "--step") if args.step else None
    token = None
    if args.bearer_token_file:
        try:
            token = Path(args.bearer_token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InputError(
                args.bearer_token_file, "(file)", f"cannot read: {exc.strerror or exc}"
            ) from None
    config = load_config(args.config)
    hosts = {h: HostIdentity(i.name, i.rack) for h, i in config.node.hosts.items()}
    client = PrometheusClient(args.prometheus, token=token, timeout_s=args.timeout_s)
    with tempfile.TemporaryDirectory(prefix="aiops-prometheus-") as scratch:
        path = args.db or os.path.join(scratch, "prometheus.duckdb")
        if args.db and Path(args.db).exists():
            raise InputError(args.db, "--db", "exists: with --prometheus, --db names a new workspace to keep")
        # a fleet's samples pivoted here: DuckDB's default workers (one per core), as the fleet's service
        workspace = Workspace(path, guardrails=config.guardrails, threads=0)
        try:
            with workspace.write(own_instance=True) as store:  # its memory bound set (mapping.bound_memory)
                report = fetch_into(
                    store,
                    client,
                    start_s=start_s,
                    end_s=end_s,
                    step_s=step_s,
                    hosts=hosts,
                    selector=args.selector,
                )
        except BaseException:
            workspace.remove()  # a half-filled --db is not left behind
            raise
        with workspace.write(own_instance=True) as store:
            bound_memory(store)  # the analysis too: DuckDB caches up to 80 % of RAM by default
            result = analyze(store)
            if args.json:
                out = result_json(result)
                out["source"] = {
                    "url": report.url,
                    "start_s": report.start_s,
                    "end_s": report.end_s,
                    "step_s": report.step_s,
                    "samples": report.samples,
                    "rows": report.rows,
                    "bytes_fetched": report.bytes_fetched,
                    "requests": report.requests,
                }
                print(json.dumps(out, default=str))
            else:
                terminal(stderr=True).print(
                    f"{markup(args.prometheus)}: {report.samples:,} samples, "
                    f"{report.rows.get('gpu_samples', 0):,} GPU rows, step {report.step_s:g} s"
                )
                render(terminal(), store, result)
    return 0
