"""How fast the web console's pages answer with 1024 GPUs x 24 h stored: the database bench/report.py generates
(128 nodes of 8 GPUs in 16 racks, GPU samples every `--interval-s`, NIC lanes, collectives, job steps, rack
power, an incident), plus evidence rows on its hypothesis, a pending physical proposal and an approver's
account. The console is served for real as `aiops run` serves it (the file held open by a `FileOwner`, its app
mounted after the service's routes on one uvicorn listener in a thread, on a loopback port) and each page is
fetched `--requests` times, signed in, by one client after `--warmup` fetches.

Prints {"gpus", "hours", "interval_s", "gpu_rows", "generate_s", "pages": {path: {"p50_ms", "p95_ms",
"max_ms"}}, "p95_ms" (all pages), "worst_page_p95_ms"}. Target: every page's p95 <= 200 ms.

    .venv/bin/python bench/console.py [--nodes 128] [--hours 24] [--interval-s 1] [--dir DIR] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.registry import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiops.console.accounts import Accounts, accounts_path
from aiops.console.app import create_app
from aiops.console.server import ServedConsole
from aiops.service.api import Api
from aiops.service.owner import FileOwner, OwnedWorkspace
from aiops.service.server import WebServer
from aiops.service.web import ServiceRoutes, service_app
from aiops.store import Store
from bench.report import EPOCH_S, generate
from guardrails.actions import Action
from guardrails.proposal_desk import Guardrails

PASSWORD = "bench password, not a secret"
PAGES = ("/", "/incidents/INC-0001", "/audit", "/collectors", "/topology", "/reports", "/chat")
_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def dress(db: Path) -> None:
    """Evidence with rows on the incident's hypothesis, a pending proposal of it, an approver's account."""
    rows = [{"gpu": f"node3/gpu{g}", "max_temp_c": 60.0 + g, "samples": 86400} for g in range(12)]
    evidence = [
        {
            "claim": "GPUs throttling",
            "sql": "SELECT gpu, max(temp_c) AS max_temp_c, count(*) AS samples "
            "FROM gpu_samples WHERE ts_s BETWEEN ? AND ? GROUP BY gpu",
            "params": [EPOCH_S, EPOCH_S + 86400],
            "rows": rows,
            "supports": True,
        }
    ] * 3
    with Store(db) as store:
        store.conn.execute(
            "UPDATE hypotheses SET evidence = ? WHERE incident_id = 'INC-0001'", [json.dumps(evidence)]
        )
        if not store.scalar("SELECT count(*) FROM proposals"):
            action = Action(
                proposal_id="P-bench",
                kind="migrate_job",
                target="node3",
                parameters={"to": "node7"},
                reason="move the job off the hot node",
                evidence=[],
                expected_effect="",
                rollback={},
                proposed_by="analyst",
                created_ts_s=time.time(),
            )
            Guardrails(store).propose(action, origin="bench", incident_id="INC-0001")
    accounts = Accounts(accounts_path(str(db)))
    if "alice" not in accounts.load():
        accounts.add("alice", "approver", PASSWORD)


def measure(db: Path, requests: int, warmup: int, every: list[float]) -> dict[str, dict[str, float]]:
    """Per page: p50, p95 and max in ms; every timed fetch is appended to `every`."""
    with socket.socket() as probe:  # a free loopback port
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    owner = FileOwner(str(db))  # the file held open, as `aiops run` and `aiops console serve` hold it
    owner.start()
    workspace = OwnedWorkspace(owner)
    console = ServedConsole(create_app(workspace))
    routes = ServiceRoutes(CollectorRegistry(), Api(workspace), lambda: (True, "ok"), lambda: (True, "ok"))
    server = WebServer(service_app(routes.routes(), console.app), f"127.0.0.1:{port}")
    server.start()
    console.start(server.host, server.port)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60) as web:
            token = _CSRF.search(web.get("/login").text)
            assert token is not None
            signed = web.post(
                "/login", data={"name": "alice", "password": PASSWORD, "csrf_token": token.group(1)}
            )
            assert signed.status_code == 303, signed.text[:300]
            out = {}
            for page in PAGES:
                took_ms = []
                for i in range(warmup + requests):
                    started = time.perf_counter()
                    reply = web.get(page)
                    elapsed_ms = (time.perf_counter() - started) * 1000
                    assert reply.status_code == 200, (page, reply.status_code)
                    if i >= warmup:
                        took_ms.append(elapsed_ms)
                took_ms.sort()
                out[page] = {
                    "p50_ms": round(statistics.median(took_ms), 1),
                    "p95_ms": round(took_ms[max(0, int(0.95 * len(took_ms)) - 1)], 1),
                    "max_ms": round(took_ms[-1], 1),
                }
                every.extend(took_ms)
            return out
    finally:
        server.close()
        console.close()
        owner.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=128)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--interval-s", type=float, default=1.0)
    parser.add_argument("--requests", type=int, default=40, help="timed fetches per page")
    parser.add_argument("--warmup", type=int, default=3, help="untimed fetches per page first")
    parser.add_argument(
        "--dir", default=None, help="where the database goes (default: a temporary directory)"
    )
    parser.add_argument(
        "--reuse", action="store_true", help="keep DIR/bench.duckdb and use it when it exists"
    )
    args = parser.parse_args()
    if args.reuse and not args.dir:
        parser.error("--reuse needs --dir")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        db = Path(args.dir) / "bench.duckdb" if args.reuse else Path(tmp) / "bench.duckdb"
        started = time.perf_counter()
        if args.reuse and db.exists():
            with Store(db, read_only=True) as store:
                rows = int(store.scalar("SELECT count(*) FROM gpu_samples"))
        else:
            rows = generate(db, args.nodes, args.hours, args.interval_s)
        generate_s = time.perf_counter() - started
        dress(db)
        every: list[float] = []
        pages = measure(db, args.requests, args.warmup, every)
    every.sort()
    print(
        json.dumps(
            {
                "gpus": args.nodes * 8,
                "hours": args.hours,
                "interval_s": args.interval_s,
                "gpu_rows": rows,
                "generate_s": round(generate_s, 1),
                "pages": pages,
                "p95_ms": round(every[max(0, int(0.95 * len(every)) - 1)], 1),
                "worst_page_p95_ms": max(p["p95_ms"] for p in pages.values()),
            }
        )
    )


if __name__ == "__main__":
    main()
