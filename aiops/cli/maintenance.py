"""`aiops maintenance add|list|end`: maintenance windows (no page, no action on their scope) and silences (no
page) on a node, rack, job, component or label, in a workspace (a node agent's, or the fleet's for the whole
cluster). Each change is audited. docs/NOTIFY.md, "Maintenance windows and silences".

    aiops maintenance add --node gpu-a100-017 --for 2h --reason "CHG-1234 swap PSU" --db /var/lib/aiops/fleet.duckdb
    aiops maintenance add --label root_cause=ambient_drift --silence --for 8h --reason "summer"
    aiops maintenance list [--all] [--json]
    aiops maintenance end M-1a2b3c4d
"""

from __future__ import annotations

import argparse
import getpass
import json
import time
from datetime import UTC, datetime

from aiops.cli.args import duration
from aiops.cli.configured import add_config_argument, add_db_argument, cli_config, configured_workspace
from aiops.errors import MaintenanceError
from aiops.runtime.maintenance import close_window, open_window
from aiops.store.maintenance import MAX_WINDOW_S, Window, windows
from aiops.text import markup, terminal

SCOPE_FLAGS = ("node", "rack", "job", "component", "label")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "maintenance", help="maintenance windows and silences: no page, no action on their scope"
    )
    verbs = p.add_subparsers(dest="maintenance_command", metavar="VERB", required=True)
    add = verbs.add_parser("add", help="a window from now (or --start) for --for")
    scope = add.add_mutually_exclusive_group(required=True)
    scope.add_argument("--node", help="a host name")
    scope.add_argument("--rack", help="a rack name")
    scope.add_argument("--job", help="a job name")
    scope.add_argument("--component", help="a component and what lies under it (node3/gpu5)")
    scope.add_argument(
        "--label", help="key=value on an incident's labels (root_cause, severity, node, rack, job)"
    )
    add.add_argument(
        "--for",
        dest="for_s",
        metavar="DURATION",
        type=duration(max_s=MAX_WINDOW_S),
        required=True,
        help="how long: 2h, 90m",
    )
    add.add_argument(
        "--start", default=None, help="when it starts (ISO 8601, e.g. 2026-05-01T22:00Z; default now)"
    )
    add.add_argument("--reason", required=True, help="why: the change ticket, the work")
    add.add_argument("--silence", action="store_true", help="stop pages only (actions may still run)")
    add.add_argument("--by", default=None, help="who (default: your login name)")
    listing = verbs.add_parser("list", help="windows active now or to come (--all: every one)")
    listing.add_argument("--all", action="store_true", help="ended and past ones too")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    end = verbs.add_parser("end", help="end a window now")
    end.add_argument("window_id", metavar="ID")
    end.add_argument("--by", default=None, help="who (default: your login name)")
    for verb in (add, listing, end):
        add_db_argument(verb)
        add_config_argument(verb)
    add.set_defaults(func=run_add)
    listing.set_defaults(func=run_list)
    end.set_defaults(func=run_end)


def _start(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise MaintenanceError(f"--start '{text[:40]}' is not an ISO 8601 time (2026-05-01T22:00Z)") from None
    if moment.tzinfo is None:
        raise MaintenanceError("--start needs a time zone (Z or +02:00): a window is on the wall clock")
    return moment.timestamp()


def _when(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _line(window: Window, now_ts_s: float) -> str:
    state = "active" if window.active(now_ts_s) else ("ended" if window.ended_ts_s is not None else "")
    state = state or ("to come" if window.starts_ts_s > now_ts_s else "over")
    end = window.ends_ts_s if window.ended_ts_s is None else min(window.ends_ts_s, window.ended_ts_s)
    return (
        f"{window.window_id}  {state:8} {window.kind:11} {window.scope} {window.target}  "
        f"{_when(window.starts_ts_s)} to {_when(end)}  by {window.created_by}: {window.reason}"
    )


def run_add(args: argparse.Namespace) -> int:
    scope, target = next((flag, getattr(args, flag)) for flag in SCOPE_FLAGS if getattr(args, flag))
    config = cli_config(args)
    with configured_workspace(args.db, config).require().write() as store:
        window = open_window(
            store,
            kind="silence" if args.silence else "maintenance",
            scope=scope,
            target=target,
            duration_s=args.for_s,
            reason=args.reason,
            by=args.by or getpass.getuser(),
            starts_ts_s=_start(args.start),
        )
    terminal().print(markup(_line(window, time.time())))
    return 0


def run_list(args: argparse.Namespace) -> int:
    now = time.time()
    config = cli_config(args)
    with configured_workspace(args.db, config).require().read() as store:
        found = windows(store, None if args.all else now)
    console = terminal()
    if args.json:
        print(json.dumps({"windows": [{**w.as_dict(), "active": w.active(now)} for w in found]}))
        return 0
    if not found:
        console.print("no maintenance window or silence" + ("" if args.all else " active or to come"))
    for window in found:
        console.print(markup(_line(window, now)))
    return 0


def run_end(args: argparse.Namespace) -> int:
    config = cli_config(args)
    with configured_workspace(args.db, config).require().write() as store:
        window = close_window(store, args.window_id, by=args.by or getpass.getuser())
    terminal().print(markup(_line(window, time.time())))
    return 0
