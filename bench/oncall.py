"""The operator's day: the product run as a cluster's operators run it, for a simulated day, with faults arriving at
random, benign churn in between, and a scripted on-call; how many pages, signatures and GPUs it took, what it broke,
and how much training the jobs got done. Prints one JSON object (its keys: docs/BENCHMARKS.md, "The operator's day").

The day (bench/oncall_cluster.py): the twin (16 nodes x 8 GPUs by default, two racks, two jobs of six nodes and four
idle spares) stepped every simulated second; a node agent per node and a facility agent, each the product's
`Service` on its node's slice; their exports imported every scrape interval (15 s) into a real VictoriaMetrics; the
fleet's `Service` reading it and dispatching approvals to the nodes; PagerDuty (Events API v2) and the DCIM input on
loopback, and a person on call approving with an SSH key made for the run (bench/oncall_people.py). Faults of every
label arrive at random (aiops/sim/arrivals.py: Poisson, seeded; several at once, some recurring, some only a
ticket's repair ends); benign churn (aiops/sim/churn.py) and scrapes that go missing (0.2 % of a node's) in between;
one node agent dies for 20 minutes and the fleet's Prometheus is unreachable for 5 (`blind`).

Yardsticks come from the twin's ground truth (bench/oncall_truth.py), which only this bench reads. ETTR (productive
step time / wall time: steps completed x the job's healthy step time, over the day's length) is measured three
times on the same faults and churn: with the product (this run), with none (faults left to run their course) and
with an oracle that fixes each fault at its onset (each fault lasting one second).

    .venv/bin/python bench/oncall.py                 # the day: 16 nodes x 8 GPUs, 24 h (hours of wall time)
    .venv/bin/python bench/oncall.py --quick         # 2 nodes, 4 simulated minutes, two faults (the test's run)
    .venv/bin/python bench/oncall.py --quiet-node-days 1000 --skip-day   # the false-alarm run (bench/oncall_quiet.py)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from aiops.scenarios import ChurnSpec, ClusterSpec, FaultSpec, JobSpec, Scenario
from aiops.sim.arrivals import NATURE, ArrivalPlan, arrivals
from aiops.sim.world import SIM_EPOCH_TS_S, World
from bench import victoria
from bench.oncall_cluster import Cluster, ClusterSetup
from bench.oncall_people import OnCall, PagerDuty, Receivers
from bench.oncall_people import announce_maintenance as announce
from bench.oncall_records import DayState, collect_records, figures, load, save
from bench.oncall_truth import Truth
from guardrails.signing import NAMESPACE, SshSigner

SCRAPE_S = 15.0
ROUTING_KEY = "R0UTINGKEY0123456789abcdef012345"  # the loopback PagerDuty's integration key (not a secret)
DROP_SCRAPE_P = 0.002


def day_scenario(
    nodes: int, hours: float, seed: int, rate_per_h: float, plan: ArrivalPlan | None = None
) -> Scenario:
    """Two racks; two jobs on 3/8 of the nodes each, the rest idle spares; faults arriving at `rate_per_h` (the
    rest of `plan`: when they may arrive, whether every kind comes at least once)."""
    per_rack = nodes // 2
    cluster = ClusterSpec(racks=2, nodes_per_rack=per_rack)
    width = max(1, (per_rack * 3) // 4)
    jobs = [
        JobSpec(
            name="llm-a", nodes=[f"node{n}" for n in range(width)], checkpoint_every_s=1800, checkpoint_gb=40
        ),
        JobSpec(
            name="llm-b",
            nodes=[f"node{per_rack + n}" for n in range(width)],
            checkpoint_every_s=1800,
            checkpoint_gb=40,
        ),
    ]
    duration_s = hours * 3600.0
    plan = replace(plan or ArrivalPlan(), rate_per_h=rate_per_h)
    faults = arrivals(cluster, jobs, duration_s, seed, plan)
    churn = ChurnSpec(pcie_nodes=[f"node{nodes - 1}"], unused_ports=["node1", f"node{per_rack + 1}"])
    return Scenario(
        name="operators-day",
        seed=seed,
        duration_s=duration_s,
        cluster=cluster,
        jobs=jobs,
        faults=faults,
        churn=churn,
    )


def quick_scenario(seed: int) -> Scenario:
    """Two nodes carrying one job, four simulated minutes: a hot GPU on one (node1's incident, and the job's
    step regression on its home node0: one problem, one page) and a misconfigured power limit on the other."""
    cluster = ClusterSpec(racks=1, nodes_per_rack=2)
    jobs = [JobSpec(name="llm-a", nodes=["node0", "node1"], checkpoint_every_s=600, checkpoint_gb=10)]
    faults = [
        FaultSpec(kind="thermal_throttle", target="node1/gpu5", start_s=45.0, severity=0.8),
        FaultSpec(kind="power_cap_misconfig", target="node0/gpu3", start_s=120.0, severity=0.7),
    ]
    return Scenario(
        name="operators-quick",
        seed=seed,
        duration_s=240.0,
        cluster=cluster,
        jobs=jobs,
        faults=faults,
        churn=ChurnSpec(rate=4.0, pcie_nodes=["node1"]),
    )


def make_keys(work: Path) -> tuple[Path, dict[str, SshSigner]]:
    """alice (on call) and bob (the second person for a two-person step): ed25519 keys made for this run."""
    lines, signers = [], {}
    for name in ("alice", "bob"):
        key = work / f"id_{name}"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
            check=True,
            timeout=60,
        )
        public = " ".join(Path(f"{key}.pub").read_text().split()[:2])
        lines.append(f'{name} namespaces="{NAMESPACE}" {public}')
        signers[name] = SshSigner(key)
    allowed = work / "allowed_signers"
    allowed.write_text("\n".join(lines) + "\n")
    return allowed, signers


def sign_runbook(path: str | None, work: Path) -> str:
    """The runbook the day runs with, copied beside its workspaces (what every tier's config names); "" none."""
    if not path:
        return ""
    copy = work / "runbook.yaml"
    copy.write_bytes(Path(path).read_bytes())
    return str(copy)


def approve_runbook(cluster: Cluster, path: str, signers: dict[str, SshSigner]) -> None:
    """People sign the runbook's exact bytes ahead of the day in every tier's workspace, as `aiops policy
    approve FILE` does (alice, and bob too where it needs two people)."""
    from guardrails.audit import AuditLog
    from guardrails.runbook import load_runbook
    from guardrails.signing import ConfiguredVerifier
    from guardrails.standing import approve_policy

    loaded = load_runbook(path)
    people = list(signers)[: loaded.approvals_required]
    for agent in cluster.every():
        with agent.service.owner.store() as store:
            verifier = ConfiguredVerifier(store.guardrails, store.path)
            for name in people:
                approve_policy(AuditLog(store), loaded, signers[name], verifier, time.time(), 7 * 86_400.0)


def oracle(scenario: Scenario) -> Scenario:
    """The same day with every fault fixed at its onset: each lasts one second (a crash at the onset still
    crashes)."""
    fixed = [f.model_copy(update={"duration_s": 1.0}) for f in scenario.faults]
    return scenario.model_copy(update={"faults": fixed})


def steps_alone(scenario: Scenario) -> list[int]:
    """Steps each job completes over the scenario with nobody acting."""
    world = World(scenario)
    for _ in range(round(scenario.duration_s)):
        world.step(1.0)
    return [int(n) for n in world.step_count]


def healthy_step_s(scenario: Scenario) -> list[float]:
    """Each job's step time on a healthy cluster (no fault, no churn): the median after the first minute of up to
    15 minutes (5 for a run shorter than that)."""
    calm_s = round(min(900.0, max(300.0, scenario.duration_s)))
    calm = scenario.model_copy(update={"faults": [], "churn": None, "duration_s": float(calm_s)})
    world = World(calm)
    times: list[list[float]] = [[] for _ in world.layout.jobs]
    for _ in range(calm_s):
        world.step(1.0)
        for _ts, job, _step, step_s, *_ in world.out.steps:
            times[[j.name for j in world.layout.jobs].index(job)].append(step_s)
    return [statistics.median(t[60:]) if len(t) > 60 else statistics.median(t) for t in times]


def ettr(steps: list[int], step_s: list[float], duration_s: float) -> float:
    return round(sum(n * s for n, s in zip(steps, step_s, strict=True)) / (duration_s * len(steps)), 4)


def ettr_three(day: DayState) -> dict[str, float]:
    """ETTR with the product (the day's own steps), with none and with the oracle (twin-only runs)."""
    scenario = day.scenario
    step_s = healthy_step_s(scenario)
    return {
        "product": ettr(day.steps, step_s, scenario.duration_s),
        "none": ettr(steps_alone(scenario), step_s, scenario.duration_s),
        "oracle": ettr(steps_alone(oracle(scenario)), step_s, scenario.duration_s),
    }


def run_day(scenario: Scenario, args: argparse.Namespace) -> DayState:
    import time_machine

    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="aiops-oncall-"))
    allowed, signers = make_keys(work)
    (work / "routing_key").write_text(ROUTING_KEY + "\n")
    (work / "jira_token").write_text("loopback-jira-token\n")  # the loopback Jira's (not a secret)
    traveller = time_machine.travel(SIM_EPOCH_TS_S, tick=False)
    clock = traveller.start()
    world = World(scenario)
    truth = Truth(world, {k: v[0] for k, v in NATURE.items()})
    pagerduty = PagerDuty(ROUTING_KEY)
    holder: dict[str, Cluster] = {}
    crew: list[str] = []  # components a filed ticket names: the repair crew takes them on (World.open_ticket)
    receivers = Receivers(
        pagerduty,
        lambda: holder["c"].dcim_document() if "c" in holder else {},
        tickets=crew.append,
        targets=lambda: holder["c"].targets() if "c" in holder else {"status": "success", "data": {}},
    )
    receivers.start()
    drops = np.random.default_rng([scenario.seed, 9])
    duration = round(scenario.duration_s)
    blind = blind_events(scenario, args)
    try:
        with victoria.serving(work) as (vm_url, _vm):
            setup = ClusterSetup(
                work=work,
                vm_url=vm_url,
                pagerduty_url=receivers.url + "/v2/enqueue",
                routing_key_file=work / "routing_key",
                dcim_url=receivers.url + "/dcim",
                allowed_signers=allowed,
                approvers={name: ["physical", "policy"] for name in signers},
                flush_s=args.flush_s,
                step_s=SCRAPE_S,
                page_from=args.page_from,
                ticket_url=receivers.url,
                ticket_token_file=work / "jira_token",
                targets_url=receivers.url,
                runbook=sign_runbook(args.runbook, work),
            )
            cluster = holder["c"] = Cluster(scenario, world, setup)
            cluster.start()
            if args.runbook:
                approve_runbook(cluster, setup.runbook, signers)
            planned = announce_maintenance(cluster, world)
            people = OnCall(
                lambda tier: cluster.fleet if tier == "fleet" else cluster.agents.get(tier),
                signers,
                delay_s=args.oncall_delay_s,
                retry_after_s=args.retry_after_s,
            )
            cluster.drop = lambda node: bool(drops.random() < DROP_SCRAPE_P)
            last_report = time.perf_counter()
            budget_s = args.wall_budget_s
            for _ in range(duration):
                over_budget = bool(budget_s) and time.perf_counter() - started > budget_s
                if (over_budget or args.stop.requested) and world.elapsed_s % SCRAPE_S == 0:
                    args.stopped_early = True  # the figures are those of the hours it ran
                    break
                while crew:
                    world.open_ticket(crew.pop(0))
                clock.move_to(world.now_ts_s + 1.0)
                apply_blind(cluster, blind, world.elapsed_s + 1.0, vm_url)
                cluster.second(on_scrape=lambda _ts: truth.sample())
                people.tick(pagerduty, world.now_ts_s)
                if args.progress and time.perf_counter() - last_report > 60:
                    last_report = time.perf_counter()
                    print(
                        f"{world.elapsed_s / 3600:.2f} h simulated, {time.perf_counter() - started:.0f} s, "
                        f"pages {len(pagerduty.alerts)}, signatures {len(people.signatures)}",
                        file=sys.stderr,
                        flush=True,
                    )
            cluster.close()
            records = collect_records(cluster, work)
    finally:
        receivers.close()
        traveller.stop()
    if args.stopped_early:
        scenario = scenario.model_copy(update={"duration_s": float(world.elapsed_s)})
        blind = [
            {**e, "end_s": min(e["end_s"], world.elapsed_s)} for e in blind if e["start_s"] < world.elapsed_s
        ]
    state = DayState(
        scenario,
        truth.ground(),
        list(pagerduty.alerts),
        list(people.signatures),
        [(c.tier, c.incident_id, len(c.steps)) for c in people.cases],
        len(people.refusals),
        blind,
        [int(n) for n in world.step_count],
        records,
        round(time.perf_counter() - started, 1),
        planned,
    )
    save(state, work / "day_state.json")
    refused = [{"at_s": ts - world.epoch_ts_s, "id": what, "why": why} for ts, what, why in people.refusals]
    (work / "refusals.json").write_text(json.dumps(refused))  # what the product refused the person, and why
    print(f"the day's workspaces and state: {work}", file=sys.stderr)
    return state


def announce_maintenance(cluster: Cluster, world: World) -> int:
    """The churn's maintenance windows, announced before the day starts on the fleet and on the node's own agent
    (`announce_maintenance`, bench/oncall_people.py). Returns the windows announced."""
    events = [e for e in (world.churn.events if world.churn else []) if e.kind == "maintenance"]
    for e in events:
        for agent in (cluster.fleet, cluster.agents[e.component]):
            with agent.service.owner.store() as store:
                announce(store, world.epoch_ts_s, e)
    return len(events)


def blind_events(scenario: Scenario, args: argparse.Namespace) -> list[dict[str, Any]]:
    """One node agent lost (20 min) and the fleet's Prometheus unreachable (5 min), in the day's quiet middle;
    none in a quick run."""
    if args.quick:
        return []
    duration = scenario.duration_s
    return [
        {
            "what": "node_agent_lost",
            "component": "node3",
            "start_s": round(duration * 0.4),
            "end_s": round(duration * 0.4) + 1200,
        },
        {
            "what": "source_down",
            "component": "prometheus",
            "start_s": round(duration * 0.7),
            "end_s": round(duration * 0.7) + 300,
        },
    ]


def apply_blind(cluster: Cluster, events: list[dict[str, Any]], elapsed_s: float, vm_url: str) -> None:
    for event in events:
        on = event["start_s"] <= elapsed_s < event["end_s"]
        if event["what"] == "node_agent_lost":
            cluster.agents[event["component"]].down = on
        else:
            collector: Any = cluster.fleet.service.sources.sources[0].collector  # type: ignore[union-attr]
            collector.client.url = f"http://127.0.0.1:{victoria.free_port()}" if on else vm_url


def arrival_plan(args: argparse.Namespace) -> ArrivalPlan:
    plan = ArrivalPlan(every_kind=not args.some_kinds)
    if args.arrivals_s:
        plan = replace(plan, first_s=args.arrivals_s[0], quiet_end_s=args.arrivals_s[1])
    return plan


class StopRequest:
    """SIGTERM once: the run stops at its next scrape, stops what it started, and prints the figures of the hours
    it ran (`stopped_early`); twice: exit 143 at once. The run polls the request at each scrape instead of
    raising from the handler: a SIGTERM that arrived during a DuckDB query was seen not to stop the run."""

    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: object) -> None:
        if self.requested:
            raise SystemExit(143)
        self.requested = True
        print(
            "bench: SIGTERM, stopping at the next scrape (again to exit at once)", file=sys.stderr, flush=True
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 nodes, 4 simulated minutes (the test's run)")
    parser.add_argument("--nodes", type=int, default=16, help="nodes of 8 GPUs (two racks)")
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours")
    parser.add_argument("--seed", type=int, default=2027)
    parser.add_argument("--rate-per-h", type=float, default=1.0, help="faults arriving per hour on average")
    parser.add_argument(
        "--arrivals-s",
        type=float,
        nargs=2,
        default=None,
        metavar=("FIRST_S", "QUIET_END_S"),
        help="faults arrive from FIRST_S into the run until QUIET_END_S before its end (default 900 3600)",
    )
    parser.add_argument(
        "--some-kinds",
        action="store_true",
        help="only the Poisson draw of faults, not every kind at least once (a short run)",
    )
    parser.add_argument(
        "--page-from",
        choices=("fleet", "every"),
        default="fleet",
        help="the PagerDuty sink on the fleet alone (docs/NOTIFY.md), or on every tier (node agents page too)",
    )
    parser.add_argument(
        "--wall-budget-s",
        type=float,
        default=None,
        help="stop the day after this much wall time (at a scrape); its figures are those of the hours it ran",
    )
    parser.add_argument("--flush-s", type=float, default=15.0, help="node agents' [store] flush_interval_s")
    parser.add_argument("--oncall-delay-s", type=float, default=300.0, help="a page is looked at after this")
    parser.add_argument("--retry-after-s", type=float, default=1800.0, help="the next step after this")
    parser.add_argument("--quiet-node-days", type=float, default=0.0, help="the false-alarm run's size")
    parser.add_argument("--quiet-racks", type=int, default=16, help="racks of 8 nodes in the false-alarm run")
    parser.add_argument(
        "--quiet-wall-s",
        type=float,
        default=None,
        help="stop the false-alarm run after this much wall time; its figures are of what it measured",
    )
    parser.add_argument(
        "--runbook",
        default=None,
        metavar="FILE",
        help="run the day with this standing runbook signed by the on-call ahead of time (docs/GUARDRAILS.md; "
        "aiops/data/runbook_example.yaml is an operator's); default: none, every step waits for a signature",
    )
    parser.add_argument("--skip-day", action="store_true", help="only the false-alarm run")
    parser.add_argument("--progress", action="store_true", help="a line on stderr every wall minute")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--refigure", default=None, metavar="DIR", help="figures of a finished day's folder")
    args = parser.parse_args()
    args.stopped_early = False
    logging.basicConfig(level=logging.ERROR)
    args.stop = StopRequest()
    signal.signal(signal.SIGTERM, args.stop)
    if args.quick:
        args.oncall_delay_s, args.retry_after_s = 30.0, 120.0
    result: dict[str, Any] = {
        "command": " ".join(["bench/oncall.py", *sys.argv[1:]]),
        "page_from": args.page_from,
        "runbook": args.runbook,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_start": [round(x, 2) for x in os.getloadavg()],
        },
    }
    if args.refigure:
        day = load(Path(args.refigure) / "day_state.json")
        result["day"] = figures(day, ettr_three(day), SCRAPE_S)
    elif not args.skip_day:
        scenario = (
            quick_scenario(args.seed)
            if args.quick
            else day_scenario(args.nodes, args.hours, args.seed, args.rate_per_h, arrival_plan(args))
        )
        day = run_day(scenario, args)
        result["day"] = figures(day, ettr_three(day), SCRAPE_S)
    if args.quiet_node_days > 0:
        from bench.oncall_quiet import run_quiet

        result["quiet"] = run_quiet(
            args.quiet_node_days,
            args.seed,
            SCRAPE_S,
            progress=args.progress,
            racks=args.quiet_racks,
            wall_budget_s=args.quiet_wall_s,
            stop=lambda: args.stop.requested,
        )
    if "day" in result:
        result["day"]["stopped_early"] = args.stopped_early
    result["goals"] = goals(result)
    result["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result, default=_plain)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def _plain(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def goals(result: dict[str, Any]) -> dict[str, Any]:
    """Issue 34's and issue 35's goals, each with the value measured and whether it is met (None: not measured
    in this run)."""
    day = result.get("day", {}).get("total", {})
    quiet = result.get("quiet", {})

    def goal(text: str, value: Any, met: bool | None) -> dict[str, Any]:
        return {"goal": text, "value": value, "met": met}

    ettr_ratio = (day.get("ettr") or {}).get("product_over_oracle")
    sigs = day.get("signatures_median_paged")
    ratio = day.get("touched_over_affected")
    pages = day.get("pages_per_fault")
    blind = day.get("blind_s_max")
    false_pages = quiet.get("false_pages_per_1000_node_days", day.get("false_pages_per_1000_node_days"))
    false_acts = quiet.get(
        "false_actionable_per_1000_node_days", day.get("false_actionable_per_1000_node_days")
    )
    node_days = quiet.get("node_days")
    scrape_s = SCRAPE_S
    return {
        "signatures_per_fault": goal(
            "median <= 1 (faults that paged; a standing runbook's own signature is before the day)",
            sigs,
            None if sigs is None else sigs <= 1,
        ),
        "gpus_touched": goal("<= 1.5 x GPUs affected", ratio, None if ratio is None else ratio <= 1.5),
        "self_inflicted": goal(
            "0", day.get("self_inflicted"), None if not day else day["self_inflicted"] == 0
        ),
        "undo_proposals": goal(
            "0", day.get("undo_proposals"), None if not day else day["undo_proposals"] == 0
        ),
        "ettr": goal(
            ">= 0.97 x the oracle's", ettr_ratio, None if ettr_ratio is None else ettr_ratio >= 0.97
        ),
        "pages_per_real_fault": goal("1.0", pages, None if pages is None else pages == 1.0),
        "false_pages": goal(
            "<= 1 per 1,000 node-days", false_pages, None if false_pages is None else false_pages <= 1
        ),
        "false_actionable_proposals": goal(
            "<= 1 per 1,000 node-days", false_acts, None if false_acts is None else false_acts <= 1
        ),
        "node_days_measured": goal(">= 1,000", node_days, None if node_days is None else node_days >= 1000),
        "blind": goal(
            f"<= 2 scrape intervals ({2 * scrape_s:g} s)",
            blind,
            None if blind is None else blind <= 2 * scrape_s,
        ),
    }


if __name__ == "__main__":
    sys.exit(main())
