"""How soon a killed node agent pages, live (issue 35: "a killed node agent -> its incident within two scrape
intervals of its last sample"; docs/BENCHMARKS.md "Blind <= 2 scrape intervals", docs/FLEET.md "How soon").

Real processes on 127.0.0.1: three node agents of one twin at real speed (`aiops run --sim S --node nodeK`), a real
scraper (Prometheus, or VictoriaMetrics with `-promscrape.config`) scraping them every `--scrape-s` (15 s), and
`aiops fleet --prometheus` reading it at that step, with a loopback webhook as its sink. Each round:

1. kill -9 of node2's agent at a random point of its scrape interval; the time from the agent's last sample (its
   last `up == 1` in the store: the scrape's own time) and from the kill to the `opened` webhook of "node agent
   lost on node2" (received on the wall clock);
2. the agent started again on the same port; the time from its first good scrape to the `resolved` webhook.

Once, before the rounds: node1's agent stopped (SIGSTOP) across exactly one of its scrapes, which times out
(`scrape_timeout` 10 s), then continued (SIGCONT): one timed-out scrape, which must page nothing (`one_timeout`).

Prints one JSON object. Example (docs/BENCHMARKS.md):
    nice -n 10 .venv/bin/python -m bench.blind_live --rounds 3 --out blind_live.json
    nice -n 10 .venv/bin/python -m bench.blind_live --store victoria-metrics --rounds 3
    nice -n 10 .venv/bin/python -m bench.blind_live --presence-only --rounds 2   # the step reads alone (before)
    nice -n 10 .venv/bin/python -m bench.blind_live --lost-on-refused false --rounds 2
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiops.lab.loopback import (
    Lab,
    agent_argv,
    agent_groups,
    aiops_argv,
    binary,
    free_port,
    http_status,
    prometheus_argv,
    prometheus_config,
    start_agents,
    wait_until,
    write_targets,
)

NODES = ("node0", "node1", "node2")
LOST, LATE = "node2", "node1"
SCENARIO = """\
name: blind-live
seed: 5
duration_s: 7200
cluster: {racks: 1, nodes_per_rack: 3, gpus_per_node: 2, nics_per_node: 1}
"""
TITLE = f"node agent lost on {LOST}"


class Webhook:
    """The fleet's sink: every JSON event with the wall time it arrived."""

    def __init__(self) -> None:
        self.got: list[tuple[float, dict[str, Any]]] = []
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with contextlib.suppress(ValueError):
                    got.append((time.time(), json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def events(self, event: str, title: str, after_s: float = 0.0) -> list[tuple[float, dict[str, Any]]]:
        return [
            (t, b)
            for t, b in list(self.got)
            if t >= after_s and b.get("event") == event and (b.get("incident") or {}).get("title") == title
        ]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


def target(store: str, instance: str) -> dict[str, Any] | None:
    for t in get_json(f"{store}/api/v1/targets")["data"]["activeTargets"]:
        if t["labels"].get("instance") == instance:
            return dict(t)
    return None


def scrape_s_of(store: str, instance: str) -> float | None:
    """The time of the target's newest scrape (seconds), None before its first."""
    t = target(store, instance)
    if t is None or str(t.get("lastScrape", "")).startswith("0001-"):
        return None
    text = str(t["lastScrape"])
    whole, _, frac = text.rstrip("Z").partition(".")
    stamp = time.mktime(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) - time.timezone
    return stamp + float("0." + (frac or "0")[:6])


def last_up_s(store: str, instance: str, before_s: float) -> float | None:
    """The time of the newest `up == 1` sample of `instance` at or before `before_s` (the store's own)."""
    query = urllib.parse.urlencode({"query": f'up{{instance="{instance}"}}[5m]', "time": repr(before_s)})
    found = get_json(f"{store}/api/v1/query?{query}")["data"]["result"]
    good = [float(ts) for series in found for ts, value in series["values"] if float(value) == 1.0]
    return max(good) if good else None


def wait(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    return wait_until(predicate, timeout_s, what, interval_s=0.2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    folder = Path(tempfile.mkdtemp(prefix="aiops-blind-live-"))
    scenario = folder / "scenario.yaml"
    scenario.write_text(SCENARIO)
    # no operator's config or environment reaches the run (HOME is the run's folder: no ~/.config/aiops)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env.update(HOME=str(folder), AIOPS_TWIN_TAG=folder.name)
    hook = Webhook()
    result: dict[str, Any] = {
        "store": args.store,
        "scrape_s": args.scrape_s,
        "lost_on_refused": args.lost_on_refused,
        "presence_only": args.presence_only,
        "rounds": [],
    }
    epoch_ts_s = time.time()
    try:
        with Lab(folder) as lab:
            ports = start_agents(lab, scenario, epoch_ts_s, NODES, "1", env)
            config = prometheus_config(folder, args.scrape_s, ["aiops"])
            write_targets(folder / "aiops.json", agent_groups(ports))
            port = free_port()
            if args.store == "prometheus":
                lab.start("prometheus", prometheus_argv(config, folder / "tsdb", port))
            else:
                vm = binary("victoria-metrics", "AIOPS_VICTORIA")
                argv = [vm, f"-promscrape.config={config}", "-promscrape.config.strictParse=false"]
                argv.append(f"-storageDataPath={folder / 'vm'}")
                lab.start("victoria", [*argv, f"-httpListenAddr=127.0.0.1:{port}"])
            store = f"http://127.0.0.1:{port}"
            ready = f"{store}/-/ready" if args.store == "prometheus" else f"{store}/health"
            wait(lambda: http_status(ready) == 200, 60, "the store")
            fleet_config = folder / "fleet.toml"
            fleet_config.write_text(
                f"[fleet]\nlost_on_refused = {str(args.lost_on_refused).lower()}\n"
                + (f'targets_url = "{hook.url}"\n' if args.presence_only else "")
                + f'\n[[notify.webhooks]]\nurl = "{hook.url}"\nkind = "json"\n'
            )
            delay = "5s" if args.store == "prometheus" else "30s"  # VictoriaMetrics answers 30 s behind
            fleet = lab.start(
                "fleet",
                aiops_argv(
                    "fleet",
                    "--prometheus",
                    store,
                    "--step",
                    f"{args.scrape_s:g}s",
                    "--delay",
                    delay,
                    "--lookback",
                    "2m",
                    "--db",
                    str(folder / "fleet.duckdb"),
                    "--listen",
                    "127.0.0.1:0",
                    "--config",
                    str(fleet_config),
                ),
                env,
            )
            fleet_url = f"http://127.0.0.1:{fleet.port()}"
            wait(lambda: http_status(f"{fleet_url}/readyz") == 200, 240, "the fleet ready")
            instance = {n: f"127.0.0.1:{p}" for n, p in ports.items()}
            # the fleet knows every agent's instance once a step read held them all
            wait(
                lambda: get_json(f"{fleet_url}/api/coverage")["totals"]["nodes_reporting"] == len(NODES),
                240,
                "every node reporting",
            )
            time.sleep(args.scrape_s)
            result["one_timeout"] = one_timeout(lab, store, instance[LATE], hook, args.scrape_s)
            listen = f"127.0.0.1:{ports[LOST]}"
            day = Day(
                lab,
                store,
                fleet_url,
                hook,
                args,
                rng,
                lambda _n: agent_argv(folder, scenario, epoch_ts_s, LOST, "1", listen),
                env,
            )
            for n in range(args.rounds):
                result["rounds"].append(one_round(day, instance[LOST], n))
                print(json.dumps(result["rounds"][-1]), file=sys.stderr, flush=True)
    finally:
        hook.close()
    rounds = result["rounds"]
    if rounds:
        result["after_last_sample_s_max"] = max(r["after_last_sample_s"] for r in rounds)
        result["after_kill_s_max"] = max(r["after_kill_s"] for r in rounds)
        result["within_two_intervals"] = result["after_last_sample_s_max"] <= 2 * args.scrape_s
    result["folder"] = str(folder)
    return result


def one_timeout(lab: Lab, store: str, instance: str, hook: Webhook, scrape_s: float) -> dict[str, Any]:
    """SIGSTOP across exactly one scrape (stopped just before it, continued after its 10 s timeout): no page."""
    proc = next(p for p in lab.procs if p.name == LATE)
    last = wait(lambda: scrape_s_of(store, instance), 60, "a scrape of node1")
    next_s = last + scrape_s
    time.sleep(max(0.0, next_s - 1.0 - time.time()))
    started_s = time.time()
    proc.popen.send_signal(signal.SIGSTOP)
    failed = wait(
        lambda: (t := target(store, instance)) and t["health"] == "down" and t,
        scrape_s + 15,
        "the timed-out scrape",
    )
    proc.popen.send_signal(signal.SIGCONT)
    wait(
        lambda: (t := target(store, instance)) and t["health"] == "up",
        2 * scrape_s + 15,
        "node1 scraped again",
    )
    time.sleep(2 * scrape_s)  # two more steps: a page would have come by now
    pages = [b for t, b in hook.got if t >= started_s and b.get("event") == "opened"]
    return {"error": str(failed.get("lastError", ""))[:160], "pages": len(pages)}


@dataclass
class Day:
    """What a round needs of the run: its processes, the store, the sink and how to start node2's agent again."""

    lab: Lab
    store: str
    fleet_url: str
    hook: Webhook
    args: argparse.Namespace
    rng: random.Random
    again: Callable[[int], list[str]]  # the agent's argv on its old port
    env: dict[str, str]


def one_round(day: Day, instance: str, n: int) -> dict[str, Any]:
    lab, store, hook, args, rng = day.lab, day.store, day.hook, day.args, day.rng
    proc = next(p for p in lab.procs if p.name.startswith(LOST) and p.alive())
    last = wait(lambda: scrape_s_of(store, instance), 60, "a scrape of node2")
    offset_s = rng.uniform(0.5, args.scrape_s - 0.5)  # where in its scrape interval the agent dies
    time.sleep(max(0.0, last + offset_s - time.time()))
    killed_s = time.time()
    proc.popen.send_signal(signal.SIGKILL)
    proc.popen.wait(timeout=10)
    opened = wait(
        lambda: hook.events("opened", TITLE, killed_s), 6 * args.scrape_s + 60, "the lost agent's page"
    )
    paged_s = opened[0][0]
    incident_id = str((opened[0][1].get("incident") or {}).get("id"))
    # the reason as it was paged (while the agent is lost, each cycle states it again)
    detail = get_json(f"{day.fleet_url}/api/incidents/{incident_id}")["symptoms"][0]["detail"]
    last_sample_s = last_up_s(store, instance, killed_s + 1)
    lab.start(f"{LOST}-again-{n}", day.again(n), day.env).port()
    first_good_s = wait(
        lambda: (t := target(store, instance)) and t["health"] == "up" and scrape_s_of(store, instance),
        3 * args.scrape_s + 30,
        "node2 scraped again",
    )
    resolved = wait(lambda: hook.events("resolved", TITLE, killed_s), 6 * args.scrape_s + 60, "resolved")
    return {
        "killed_into_interval_s": round(killed_s - last, 1),
        "after_kill_s": round(paged_s - killed_s, 1),
        "after_last_sample_s": round(paged_s - last_sample_s, 1) if last_sample_s is not None else None,
        "resolved_after_first_good_scrape_s": round(resolved[0][0] - first_good_s, 1),
        "pages": len(opened),
        "reason": str(detail.get("reason", ""))[:240],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--store", choices=("prometheus", "victoria-metrics"), default="prometheus")
    p.add_argument("--scrape-s", type=float, default=15.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--lost-on-refused",
        type=lambda v: v == "true",
        default=True,
        metavar="true|false",
        help="[fleet] lost_on_refused (false: two failed scrapes, as for a timeout)",
    )
    p.add_argument(
        "--presence-only",
        action="store_true",
        help="the fleet's targets_url a server without the targets API (the webhook): its step reads alone "
        "decide, as before the targets API was read",
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    result = run(args)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
