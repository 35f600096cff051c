"""`make fleet-demo`: the cluster path on loopback, as an operator would run it, in one command.

    .venv/bin/python scripts/fleet_demo.py [--out out/fleet-demo] [--duration-s S]   (FLEET_DEMO_S=S: the same)
    .venv/bin/python scripts/fleet_demo.py --stop [--out out/fleet-demo]              (`make fleet-demo-stop`)

Starts, on 127.0.0.1 only: the twin's node agents (`aiops run --sim S --node nodeK`, one shared clock) and its
facility agent (the racks' sensors and the DCIM caps), a real Prometheus scraping them and the fleet with the Helm
chart's own alert rules (rendered from deploy/helm/aiops), a real Alertmanager with the chart's inhibitions, and
`aiops fleet` with its console. It makes an SSH signing key and an approver for the demo (`oncall`: an approver in
the console and in every node's allowed-signers file) under the output folder, prints the URLs, the sign-in and
the commands to approve, investigate and report, and reports what the fleet found as it goes. Ctrl-C (or
`--duration-s`, or `--stop` from another terminal: SIGTERM to the PID in the folder's marker) stops every process, the fleet first (its last flush), and leaves the fleet's workspace at
`<out>/fleet.duckdb`. A cooling fault on node3/gpu1 begins 30 s in: the fleet diagnoses it and files its plan
within about two minutes.

Exit 0 when every process ran until asked to stop (and, with a duration, the fleet diagnosed the fault and filed
a plan); 1 otherwise, naming the process and its log. A run starts afresh: an earlier demo's folder (it holds
`fleet-demo.json`) is emptied first; any other non-empty folder is refused.

`build_workspace(folder)` runs it until the plan is filed and returns the workspace's path: for tests that read a
fleet workspace the way this demo leaves it (docs/FLEET.md, "Try it: make fleet-demo").
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "aiops"
MARKER = "fleet-demo.json"  # what a folder this demo made holds (and what it may empty)
APPROVER = "oncall"
NODES_N = 4  # the default fleet: two racks of two nodes
SPEED = "10"  # simulated seconds per wall second: the fault starts 30 s in
STEP_S = 2.0  # Prometheus's scrape interval, the fleet's step


def node_names(count: int) -> tuple[str, ...]:
    return tuple(f"node{i}" for i in range(count))


def faulted(count: int) -> str:
    """The GPU whose cooling fails: the last node's gpu1."""
    return f"node{count - 1}/gpu1"


def scenario(count: int) -> str:
    """The demo's cluster: racks of two nodes, four GPUs each, one training job on all of them; the last node's
    gpu1 loses its cooling 300 simulated seconds in (30 s of wall time at --speed SPEED); an odd count puts one
    node in each rack."""
    per_rack = 2 if count % 2 == 0 else 1
    return f"""\
# The fleet demo's cluster (scripts/fleet_demo.py): {count} node(s), {per_rack} a rack, four GPUs each, one training job on
# all of them. {faulted(count)}'s cooling fails 300 simulated seconds in (30 s of wall time at --speed {SPEED}).
name: fleet-demo
seed: 7
duration_s: 86400
cluster: {{racks: {count // per_rack}, nodes_per_rack: {per_rack}, gpus_per_node: 4, nics_per_node: 1}}
jobs:
  - {{name: llm, nodes: all, step_compute_s: 1.2, allreduce_mb: 256}}
faults:
  - {{kind: thermal_throttle, target: {faulted(count)}, start_s: 300, severity: 0.9}}
"""


@dataclass
class Demo:
    """What the demo made and where it listens (filled as it starts)."""

    folder: Path
    nodes: tuple[str, ...] = node_names(NODES_N)
    password: str = ""
    console_url: str = ""
    prometheus_url: str = ""
    alertmanager_url: str = ""
    agents: dict[str, int] | None = None

    @property
    def db(self) -> Path:
        return self.folder / "fleet.duckdb"

    @property
    def key(self) -> Path:
        return self.folder / "keys" / f"id_{APPROVER}"

    @property
    def config(self) -> Path:
        return self.folder / "fleet.toml"


# -- set-up ---------------------------------------------------------------------------------------------------------
def fresh_folder(folder: Path) -> None:
    """An empty `folder`: one an earlier demo made is emptied; any other non-empty folder is refused."""
    from aiops.errors import InputError

    if folder.exists() and any(folder.iterdir()):
        pid = running_pid(folder)
        if pid is not None:
            raise InputError(
                str(folder), "--out", f"a fleet demo runs there (PID {pid}): make fleet-demo-stop"
            )
        if not (folder / MARKER).is_file():
            raise InputError(str(folder), "--out", "not empty and not an earlier fleet demo's folder")
        shutil.rmtree(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MARKER).write_text(json.dumps({"made_by": "scripts/fleet_demo.py", "pid": os.getpid()}) + "\n")


def running_pid(folder: Path) -> int | None:
    """The PID of the demo that runs in `folder` (the one its marker names, if that process is this script)."""
    try:
        pid = int(json.loads((folder / MARKER).read_text())["pid"])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if any(arg.endswith(b"fleet_demo.py") for arg in cmdline) else None


def alive(pid: int) -> bool:
    """Process `pid` runs (an ended one its parent has not reaped yet, a zombie, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop_running(folder: Path, timeout_s: float = 120.0, out: TextIO = sys.stdout) -> int:
    """`make fleet-demo-stop`: SIGTERM to the demo that runs in `folder`, then wait until it has stopped
    everything; 0 when none runs (any more)."""
    pid = running_pid(folder)
    if pid is None:
        print(f"no fleet demo runs in {shown(folder)}", file=out)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive(pid):
        print(f"the fleet demo (PID {pid}) is still stopping after {timeout_s:g} s", file=out)
        return 1
    print(f"stopped the fleet demo (PID {pid}); its workspace: {shown(folder / 'fleet.duckdb')}", file=out)
    return 0


def chart_alerting(folder: Path) -> list[dict[str, Any]]:
    """The chart's PrometheusRule as a rule file in `folder` (rules.yml) and its Alertmanager inhibitions, both
    rendered by Helm's own engine (helm-python-sdk: a dev dependency `make setup` installs) from the chart's
    defaults."""
    import yaml

    try:
        import helm_python  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        from aiops.errors import PrerequisiteError

        raise PrerequisiteError(
            "helm-python-sdk is not installed: run `make setup` (it installs the dev extra)"
        ) from None
    with helm_python.Chart.load(str(CHART)) as chart:
        manifests: dict[str, str] = chart.render({}, name="aiops", namespace="aiops")
    objects = [
        d
        for name, text in manifests.items()
        if not name.endswith("NOTES.txt")
        for d in yaml.safe_load_all(text)
        if d
    ]
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    (folder / "rules.yml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    inhibit = next(
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-inhibit")
    )
    return list(yaml.safe_load(inhibit["data"]["inhibit_rules.yaml"])["inhibit_rules"])


def make_signer(demo: Demo) -> None:
    """An ed25519 key for the demo's approver (ssh-keygen), the allowed-signers file naming it, a node token."""
    from aiops.lab.loopback import binary
    from guardrails.signing import NAMESPACE

    keys = demo.key.parent
    keys.mkdir(mode=0o700)
    subprocess.run(
        [
            binary("ssh-keygen"),
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            f"{APPROVER}@fleet-demo",
            "-f",
            str(demo.key),
        ],
        check=True,
        capture_output=True,
    )
    public = " ".join(Path(f"{demo.key}.pub").read_text().split()[:2])
    (keys / "allowed_signers").write_text(f'{APPROVER} namespaces="{NAMESPACE}" {public}\n')
    token = keys / "node-token"
    token.write_text(secrets.token_urlsafe(32) + "\n")
    token.chmod(0o600)


def guardrails_toml(demo: Demo) -> str:
    keys = demo.key.parent
    return f'[guardrails]\nallowed_signers = "{keys / "allowed_signers"}"\n\n[guardrails.approvers]\n{APPROVER} = ["physical"]\n'


def node_config(demo: Demo) -> Path:
    """Every node agent's config: who may approve (the node checks signatures itself) and its /api token."""
    path = demo.folder / "node.toml"
    path.write_text(guardrails_toml(demo) + f'\n[http]\ntoken_file = "{demo.key.parent / "node-token"}"\n')
    return path


def facility_config(demo: Demo) -> Path:
    """The facility agent's: no /api token, as the fleet reads its DCIM document without one ([facility] dcim has
    no token setting); it executes nothing, so it names no approver."""
    path = demo.folder / "facility.toml"
    path.write_text("# the twin's facility agent (the racks' sensors, the DCIM caps): nothing to set\n")
    return path


def fleet_config(demo: Demo, ports: dict[str, int], alertmanager_port: int, grafana_url: str) -> Path:
    nodes = "\n".join(f'{n} = "http://127.0.0.1:{p}"' for n, p in ports.items() if n in demo.nodes)
    grafana = f'grafana_url = "{grafana_url}"\n' if grafana_url else ""
    demo.config.write_text(
        guardrails_toml(demo)
        + f'\n[console]\nenabled = true\nurl = "{demo.console_url}"\n{grafana}'
        + f'\n[fleet]\nnode_token_file = "{demo.key.parent / "node-token"}"\n\n[fleet.nodes]\n{nodes}\n'
        + f'\n[facility]\ndcim = "http://127.0.0.1:{ports["facility"]}/api/dcim"\n'
        + f'\n[notify]\nconsole_url = "{demo.console_url}"\n'
        + f'\n[[notify.webhooks]]\nkind = "alertmanager"\nurl = "http://127.0.0.1:{alertmanager_port}/api/v2/alerts"\n'
    )
    return demo.config


def add_account(demo: Demo) -> None:
    from aiops.console.accounts import Accounts, accounts_path

    demo.password = secrets.token_urlsafe(12)
    Accounts(accounts_path(str(demo.db))).add(APPROVER, "approver", demo.password)
    secret = demo.folder / "console-password"
    secret.write_text(demo.password + "\n")
    secret.chmod(0o600)


def environment(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
    env["AIOPS_CONFIG"] = str(config)
    return env


# -- what to tell the person ----------------------------------------------------------------------------------------
def shown(path: Path) -> str:
    """`path` relative to the working directory when it lies inside it (what a person types)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def aiops_command() -> str:
    return shown(Path(sys.executable).parent / "aiops")


def commands(demo: Demo, step_id: str = "STEP") -> list[tuple[str, str]]:
    aiops, db, config = aiops_command(), shown(demo.db), shown(demo.config)
    return [
        ("approve", f"{aiops} actions approve {step_id} --key {shown(demo.key)} --db {db} --config {config}"),
        ("investigate", f"{aiops} chat --db {db} --config {config}"),
        ("report", f"{aiops} report --db {db} --since 1h --out {shown(demo.folder / 'report')}"),
    ]


def api(url: str) -> Any:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as reply:
        return json.loads(reply.read())


@dataclass
class Progress:
    """What the fleet has found so far (read from its /api while it runs)."""

    incident: str = ""
    step_id: str = ""

    def poll(self, demo: Demo, say: Callable[[str], None]) -> None:
        try:
            incidents = api(demo.console_url + "/api/incidents")["incidents"]
            proposals = api(demo.console_url + "/api/proposals")["proposals"]
        except (OSError, ValueError, KeyError):
            return
        if not self.incident:
            for i in incidents:
                top = i.get("top_hypothesis") or {}
                if top.get("root_cause") and not i.get("condition"):
                    self.incident = str(i["incident_id"])
                    say(
                        f"diagnosed {self.incident}: {top['root_cause']} on {top.get('component')} "
                        f"({100 * float(top.get('confidence') or 0):.0f} %): {demo.console_url}/incidents/{self.incident}"
                    )
                    break
        if self.incident and not self.step_id:
            for p in proposals:
                if (
                    p.get("incident_id") == self.incident
                    and p.get("step_id")
                    and p.get("physical")
                    and p.get("status") == "pending"
                ):
                    self.step_id = str(p["step_id"])
                    say(
                        f"plan filed: step {self.step_id} ({p['kind']} on {p['target']}) waits for a signature:"
                    )
                    for what, line in commands(demo, self.step_id):
                        say(f"  {what:<12}{line}")
                    break


# -- the run ------------------------------------------------------------------------------------------------------
def run(
    folder: Path,
    duration_s: float | None,
    out: TextIO = sys.stdout,
    *,
    grafana_url: str = "",
    stop: threading.Event | None = None,
    until_planned: bool = False,
    nodes: int = NODES_N,
) -> int:
    """The demo of `nodes` node agents in `folder` until `stop` is set (Ctrl-C, SIGTERM), `duration_s` passes, or (`until_planned`) the
    fleet has filed its plan; 0 when it ran as asked (see the module's text)."""
    from aiops.errors import AiopsError
    from aiops.lab import loopback as lab_

    stop = stop or threading.Event()
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:5.0f} s] {text}", file=out, flush=True)

    folder = folder.resolve()
    fresh_folder(folder)
    demo = Demo(folder, node_names(nodes))
    progress = Progress()
    failed = ""
    with lab_.Lab(folder, log_dir=folder / "logs") as lab:
        try:
            make_signer(demo)
            inhibit = chart_alerting(folder)
            (folder / "scenario.yaml").write_text(scenario(len(demo.nodes)))
            am_port, prom_port, fleet_port = lab_.free_port(), lab_.free_port(), lab_.free_port()
            demo.console_url = f"http://127.0.0.1:{fleet_port}"
            demo.prometheus_url = f"http://127.0.0.1:{prom_port}"
            demo.alertmanager_url = f"http://127.0.0.1:{am_port}"
            am = lab.start("alertmanager", lab_.alertmanager_argv(
                lab_.alertmanager_config(folder, inhibit), folder / "alertmanager-data", am_port))  # fmt: skip
            prom_config = lab_.prometheus_config(
                folder,
                STEP_S,
                ("aiops-node", "aiops-fleet"),
                rule_files=[folder / "rules.yml"],
                alertmanager_port=am_port,
            )
            prom = lab.start(
                "prometheus", lab_.prometheus_argv(prom_config, folder / "prometheus-data", prom_port)
            )
            add_account(demo)
            say(
                f"starting {len(demo.nodes)} node agent(s) and the facility agent of the twin (--speed {SPEED})"
            )
            node_env, facility_env = environment(node_config(demo)), environment(facility_config(demo))
            agents = lab_.start_agents(
                lab, folder / "scenario.yaml", time.time(), (*demo.nodes, lab_.FACILITY), SPEED,
                lambda node: facility_env if node == lab_.FACILITY else node_env,
            )  # fmt: skip
            demo.agents = agents
            lab_.wait_http(am, demo.alertmanager_url + "/-/ready")
            lab_.wait_http(prom, demo.prometheus_url + "/-/ready")
            lab_.write_targets(folder / "aiops-node.json", lab_.agent_groups(agents))
            fleet_argv = lab_.fleet_argv(
                demo.prometheus_url, demo.db, step_s=STEP_S, listen=f"127.0.0.1:{fleet_port}"
            )
            fleet = lab.start(
                "fleet", fleet_argv, environment(fleet_config(demo, agents, am_port, grafana_url))
            )
            lab_.wait_http(fleet, demo.console_url + "/healthz")
            lab_.write_targets(folder / "aiops-fleet.json", [{"targets": [f"127.0.0.1:{fleet_port}"]}])
            banner(demo, out)
            while not stop.is_set():
                if duration_s is not None and time.monotonic() - started >= duration_s:
                    say(f"{duration_s:g} s passed: stopping")
                    break
                dead = lab.dead()
                if dead:
                    raise dead[0].died("while the demo ran")
                progress.poll(demo, say)
                if until_planned and progress.step_id:
                    break
                stop.wait(2.0)
            else:
                say("stopping (asked to)")
        except AiopsError as exc:
            failed = str(exc)
        except subprocess.CalledProcessError as exc:
            failed = f"{exc.cmd[0]} failed: {exc.stderr!r}"
        finally:
            statuses = lab.close()
    unclean = {n: s for n, s in statuses.items() if s not in (0, -signal.SIGTERM)}
    if unclean and not failed:
        failed = "stopped uncleanly: " + ", ".join(f"{n} exit {s}" for n, s in unclean.items())
    if failed:
        print(f"fleet demo failed: {failed}", file=out, flush=True)
        return 1
    return summary(demo, duration_s is not None or until_planned, out)


def banner(demo: Demo, out: TextIO) -> None:
    lines = [
        "",
        "The fleet demo runs (Ctrl-C stops it; everything listens on 127.0.0.1):",
        f"  console       {demo.console_url}/   sign in as {APPROVER}, password {demo.password}",
        f"  prometheus    {demo.prometheus_url}/   (the chart's alert rules: {demo.prometheus_url}/alerts)",
        f"  alertmanager  {demo.alertmanager_url}/",
        f"  node agents   {', '.join(f'{n} :{p}' for n, p in (demo.agents or {}).items())}",
        f"  workspace     {shown(demo.db)}   (logs: {shown(demo.folder / 'logs')})",
        f"  signing key   {shown(demo.key)} ({APPROVER}, allowed on every node; made for this demo)",
        "The commands (in another terminal; STEP is the plan step the fleet files, printed below when it does):",
        *(f"  {what:<12}{line}" for what, line in commands(demo)),
        f"{faulted(len(demo.nodes))}'s cooling fails 30 s in; the fleet diagnoses it and files a plan within about"
        " two minutes.",
        "",
    ]
    print("\n".join(lines), file=out, flush=True)


def summary(demo: Demo, must_have_plan: bool, out: TextIO) -> int:
    """What the workspace holds now the fleet stopped; 1 when a timed run ends with no diagnosis or no plan."""
    from aiops.pipeline import stored_diagnoses
    from aiops.plans import plans
    from aiops.store import Workspace

    with Workspace(demo.db).read() as store:
        diagnosed = [d for d in stored_diagnoses(store) if d.hypotheses]
        filed = plans(store)
    print(f"\nThe fleet's workspace: {shown(demo.db)}", file=out)
    for d in diagnosed:
        top = d.hypotheses[0]
        print(
            f"  {d.incident.incident_id}: {top.root_cause} on {top.component} ({top.confidence:.0%})",
            file=out,
        )
    for p in filed:
        steps = "; ".join(f"{s.step_no}. {s.title} [{s.status}]" for s in p.steps)
        print(f"  plan {p.plan_id} for {p.incident_id}: {steps}", file=out)
    out.flush()
    if must_have_plan and not (diagnosed and filed):
        print(
            "fleet demo failed: the fleet filed no diagnosed incident and plan in time", file=out, flush=True
        )
        return 1
    return 0


def build_workspace(folder: Path, timeout_s: float = 300.0, out: TextIO | None = None) -> Path:
    """Run the demo in `folder` until the fleet has diagnosed the fault and filed its plan (at most `timeout_s`),
    stop it, and return the fleet's workspace (`folder`/fleet.duckdb). AssertionError when it did not."""
    import io

    log = out or io.StringIO()
    status = run(folder, timeout_s, log, until_planned=True)
    if status != 0:
        raise AssertionError(
            log.getvalue()[-3000:] if isinstance(log, io.StringIO) else f"fleet demo exit {status}"
        )
    return folder / "fleet.duckdb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", default="out/fleet-demo", help="its folder (default out/fleet-demo)")
    parser.add_argument(
        "--duration-s", type=float, default=float(os.environ["FLEET_DEMO_S"]) if os.environ.get("FLEET_DEMO_S") else None,
        help="stop after this many seconds (default $FLEET_DEMO_S, else at Ctrl-C)",
    )  # fmt: skip
    parser.add_argument(
        "--grafana-url", default=os.environ.get("FLEET_DEMO_GRAFANA_URL", ""),
        help="a Grafana with deploy/grafana's dashboards: the console links its panels ($FLEET_DEMO_GRAFANA_URL)",
    )  # fmt: skip
    parser.add_argument(
        "--nodes", type=int, default=NODES_N, choices=range(1, 65), metavar="1..64",
        help=f"how many node agents (default {NODES_N}, two a rack)",
    )  # fmt: skip
    parser.add_argument(
        "--stop", action="store_true", help="stop the demo that runs in --out (`make fleet-demo-stop`)"
    )
    args = parser.parse_args(argv)
    if args.stop:
        return stop_running(Path(args.out))
    stop = threading.Event()

    def asked(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, asked)
    signal.signal(signal.SIGTERM, asked)
    try:
        return run(Path(args.out), args.duration_s, grafana_url=args.grafana_url, stop=stop, nodes=args.nodes)
    except Exception as exc:  # an error of the set-up (a folder refused, a binary missing): one line
        from aiops.errors import AiopsError

        if not isinstance(exc, AiopsError):
            raise
        print(f"fleet demo: {exc}", file=sys.stderr)
        return int(exc.exit_code)


if __name__ == "__main__":
    sys.exit(main())
