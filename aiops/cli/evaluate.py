"""`aiops eval --suite DIR [--json]`: score every scenario of a suite (see evals/harness.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.table import Table

from aiops.cli.args import count, duration
from aiops.cli.configured import agent_config, cli_config
from aiops.text import as_text, plain, terminal
from evals.harness import PUBLIC_SUITE, run_suite, suite_files
from evals.real_harness import run_real
from evals.scoring import MISSED


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval", help="run and score a scenario suite")
    p.add_argument(
        "--suite", default=str(PUBLIC_SUITE), help="folder of scenario YAML files (default: the public suite)"
    )
    p.add_argument(
        "--real",
        default=None,
        metavar="DIR",
        help="score `aiops investigate` on a corpus of real incidents instead (evals/real)",
    )
    p.add_argument(
        "--with-llm",
        action="store_true",
        help="with a model configured ([llm] or AIOPS_LLM_*), also score the verified LLM hypotheses merged "
        "into the analyst's ranking (unverified ones never count); without a model nothing changes",
    )
    p.add_argument(
        "--via",
        choices=("store", "prometheus"),
        default="store",
        help="prometheus: score the fleet path (each node's exports through a real Prometheus, read back by "
        "the fleet analyst; needs prometheus and promtool)",
    )
    p.add_argument(
        "--step",
        type=duration(max_s=3600.0),
        default=15.0,
        help="with --via prometheus: the scrape interval (15s, 30s, 1m; default 15s)",
    )
    p.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    p.add_argument(
        "--workers",
        type=count(low=1, high=1024),
        default=None,
        help="parallel processes (default: CPU count)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.real is not None:
        return run_real_corpus(args)
    err = terminal(stderr=True)
    total = len(suite_files(args.suite))
    done = [0]

    def on_case(case: dict[str, Any]) -> None:
        done[0] += 1
        mark = "ok " if case["top1"] else "MISS"
        err.print(f"[{done[0]}/{total}] {mark} {plain(case['name'])}", highlight=False, markup=False)

    agent = agent_config(cli_config(args))
    if args.with_llm and not agent.online:
        err.print(
            "--with-llm: no model configured, the analyst alone is scored", highlight=False, markup=False
        )
    result = run_suite(
        args.suite,
        workers=args.workers,
        on_case=on_case,
        with_llm=args.with_llm,
        agent=agent,
        via_prometheus_step_s=args.step if args.via == "prometheus" else None,
    )
    if args.json:
        print(json.dumps(result))
        return 0
    table = Table(title=as_text(f"eval: {args.suite}"))
    for column in ("case", "expected", "predicted (top 1)", "top1", "top3", "causes@3", "delay s", "FP"):
        table.add_column(column)
    for c in result["cases"]:
        causes = c.get("causes") or [c["expected"]]
        exp = "; ".join(f"{e['root_cause']} {e['component']}".strip() for e in causes)
        found = f"{sum(e['found'] for e in c['causes'])}/{len(c['causes'])}" if c.get("causes") else ""
        pred = c["predicted"][0] if c["predicted"] else None
        shown = f"{pred['root_cause']} {pred['component']} ({pred['confidence']:.2f})" if pred else "—"
        table.add_row(
            as_text(c["name"]),
            as_text(exp),
            as_text(shown),
            "✓" if c["top1"] else "✗",
            "✓" if c["top3"] else "✗",
            found,
            "" if c["detect_delay_s"] is None else f"{c['detect_delay_s']:g}",
            str(c["false_positives"]),
        )
    console = terminal()
    console.print(table)
    summary = dict(result["summary"])
    confusion = summary.pop("confusion", {})
    if confusion:
        console.print(confusion_table(confusion))
    console.print(summary)
    return 0


def confusion_table(confusion: dict[str, dict[str, int]]) -> Table:
    """One row per expected label: how often the analyst's top-1 label was that label, which other top-1 labels
    it gave instead (the off-diagonal cells of expected x top-1), and `missed` (no incident in the window). The
    full matrix is `summary.confusion` of `--json`."""
    table = Table(title="confusion per expected label (top-1 label of the incident that covers the cause)")
    for column in ("expected", "causes", "top-1 right", "top-1 instead", MISSED):
        table.add_column(column)
    for label, row in confusion.items():
        others = ", ".join(f"{got} x{n}" for got, n in row.items() if got not in (label, MISSED))
        table.add_row(
            as_text(label),
            str(sum(row.values())),
            str(row.get(label, 0)),
            as_text(others),
            str(row.get(MISSED, 0)),
        )
    return table


def run_real_corpus(args: argparse.Namespace) -> int:
    result = run_real(args.real)
    if args.json:
        print(json.dumps(result))
        return 0
    table = Table(title=as_text(f"eval --real: {args.real}"))
    for column in ("case", "cause", "verdict", "top hypothesis", "right"):
        table.add_column(column)
    for c in result["cases"]:
        top = c["top"]
        shown = f"{top['root_cause']} {top['component']} ({top['confidence']:.2f})" if top else "—"
        table.add_row(
            as_text(c["id"]),
            as_text(c["cause"]),
            as_text(c["verdict"] or f"error: {c['error']}"),
            as_text(shown),
            "✓" if c["right"] else "✗",
        )
    console = terminal()
    console.print(table)
    s = result["summary"]
    console.print(
        as_text(f"right: {s['right']}/{s['cases']} = {s['right_fraction']:.3f}  by group: {s['by_group']}")
    )
    console.print(as_text(f"by batch: {s['by_batch']}"))
    console.print(as_text(f"labels: {s['labels']}"))
    console.print(as_text(f"abstentions: {s['abstentions']}"))
    calibration = Table(title="calibration (top hypothesis)")
    for column in ("confidence", "cases", "mean confidence", "label right"):
        calibration.add_column(column)
    for b in s["calibration"]:
        low, high = b["bin"]
        calibration.add_row(
            f"[{low:.1f}, {high:.1f}{']' if high >= 1.0 else ')'}",
            str(b["cases"]),
            "—" if b["mean_confidence"] is None else f"{b['mean_confidence']:.2f}",
            "—" if b["label_right_fraction"] is None else f"{b['label_right_fraction']:.2f}",
        )
    console.print(calibration)
    return 0
